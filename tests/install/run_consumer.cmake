# Installs flashattn into a fresh prefix and builds and runs tests/install (the consumer and README.md's
# example) against it. Run as a script:
#   cmake -DSOURCE_DIR=... -DWORK_DIR=... -DGENERATOR=... -DCXX=... -DLIBRARY=<file name>
#         (-DBUILD_DIR=<built tree> | -DSHARED=ON)
#         -P run_consumer.cmake
# LIBRARY names the library file the install must contain. With SHARED=ON the script first configures and
# builds the library itself with BUILD_SHARED_LIBS=ON.
cmake_minimum_required(VERSION 3.25)

include(${CMAKE_CURRENT_LIST_DIR}/script_helpers.cmake)  # run(), extract_readme_example()

foreach(var SOURCE_DIR WORK_DIR GENERATOR CXX LIBRARY)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_consumer.cmake needs -D${var}=...")
  endif()
endforeach()
set(common_args -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=Release)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

if(SHARED)
  set(BUILD_DIR ${WORK_DIR}/library)
  # The MPI component is checked by the static install: this build stays the core library's, compiled for
  # one SIMD target, the compiler flags' own (the release build tests every target's kernels;
  # cmake/simd_targets.cmake), in the Debug configuration, which compiles in a fraction of Release's time: the
  # test checks the install, the exports and a call, not the kernels' speed (the consumer stays Release).
  run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${BUILD_DIR} ${common_args} -DCMAKE_BUILD_TYPE=Debug -DBUILD_SHARED_LIBS=ON
      -DFLASHATTN_ENABLE_TESTS=OFF -DFLASHATTN_ENABLE_CLI=OFF -DFLASHATTN_ENABLE_BENCH=OFF
      -DFLASHATTN_BUILD_PYTHON=OFF -DFLASHATTN_ENABLE_MPI=OFF -DFLASHATTN_SIMD_TARGETS=baseline)
  run(${CMAKE_COMMAND} --build ${BUILD_DIR} --parallel 2)
endif()
set(prefix ${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
file(GLOB_RECURSE installed_library ${prefix}/${LIBRARY})
file(GLOB_RECURSE installed_config ${prefix}/flashattnConfig.cmake)
if(NOT installed_library OR NOT installed_config OR NOT EXISTS ${prefix}/include/flashattn/flashattn.h)
  message(FATAL_ERROR "the install into ${prefix} lacks ${LIBRARY}, flashattnConfig.cmake or the header")
endif()

extract_readme_example(${SOURCE_DIR} example cpp ${WORK_DIR}/readme_example.cc)

# The MPI component was installed if flashattn was built with MPI: then the consumer uses it too.
file(GLOB_RECURSE installed_mpi_config ${prefix}/flashattnMpiTargets.cmake)
set(mpi_consumer OFF)
if(installed_mpi_config)
  set(mpi_consumer ON)
endif()
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install -B ${WORK_DIR}/consumer ${common_args}
    -DCMAKE_PREFIX_PATH=${prefix} -DREADME_EXAMPLE=${WORK_DIR}/readme_example.cc -DMPI_CONSUMER=${mpi_consumer})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer --parallel 2)
run(${WORK_DIR}/consumer/app)
message(STATUS "${output}")
run(${WORK_DIR}/consumer/readme_example)
message(STATUS "README example printed:\n${output}")
if(NOT output MATCHES "O\\[token 0\\] = 0 ")
  message(FATAL_ERROR "README example: expected 'O[token 0] = 0 ' (token 0 sees only key 0, whose V row is 0)")
endif()

if(mpi_consumer)
  find_program(MPIEXEC NAMES mpiexec mpirun REQUIRED)
  set(ENV{OMPI_ALLOW_RUN_AS_ROOT} 1)  # Open MPI refuses to start as root without these two
  set(ENV{OMPI_ALLOW_RUN_AS_ROOT_CONFIRM} 1)
  run(${MPIEXEC} --oversubscribe -np 2 ${WORK_DIR}/consumer/mpi_app)
  message(STATUS "MPI consumer printed:\n${output}")
endif()
