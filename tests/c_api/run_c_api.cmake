# Installs flashattn into a fresh prefix and builds C programs against it as a C user would, with
# `pkg-config --cflags --libs flashattn` and `cc -std=c11 -Wall -Werror -pedantic`: c_api_test.c (every entry
# point of include/flashattn/c_api.h) and README.md's C example. With a shared library it also calls the
# library from Python through ctypes (ctypes_forward.py). Run as a script:
#   cmake -DSOURCE_DIR=... -DBUILD_DIR=<built tree> -DWORK_DIR=... -DCC=... -DVERSION=<project version>
#         -DLINKAGE=static|shared [-DPYTHON=<interpreter>] -P run_c_api.cmake
cmake_minimum_required(VERSION 3.25)

include(${CMAKE_CURRENT_LIST_DIR}/../install/script_helpers.cmake)  # run(), extract_readme_example()

foreach(var SOURCE_DIR BUILD_DIR WORK_DIR CC VERSION LINKAGE)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_c_api.cmake needs -D${var}=...")
  endif()
endforeach()
find_program(PKG_CONFIG NAMES pkg-config pkgconf REQUIRED)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
file(GLOB_RECURSE pc_file ${prefix}/flashattn.pc)
if(NOT pc_file)
  message(FATAL_ERROR "the install into ${prefix} has no flashattn.pc")
endif()
get_filename_component(pc_dir ${pc_file} DIRECTORY)

# pkg-config's flags, from the installed file only (no other .pc file of flashattn on the search path).
set(pkg_config ${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${pc_dir} --unset=PKG_CONFIG_LIBDIR ${PKG_CONFIG})
run(${pkg_config} --modversion flashattn)
string(STRIP "${output}" modversion)
if(NOT modversion STREQUAL VERSION)
  message(FATAL_ERROR "flashattn.pc says version ${modversion}, the project is ${VERSION}")
endif()
run(${pkg_config} --cflags flashattn)
separate_arguments(cflags UNIX_COMMAND "${output}")
if(LINKAGE STREQUAL "static")
  run(${pkg_config} --libs --static flashattn)
else()
  run(${pkg_config} --libs flashattn)
endif()
separate_arguments(libs UNIX_COMMAND "${output}")
run(${pkg_config} --variable=libdir flashattn)
string(STRIP "${output}" libdir)
message(STATUS "pkg-config --cflags: ${cflags}\npkg-config --libs (${LINKAGE}): ${libs}")
if(LINKAGE STREQUAL "shared")
  list(APPEND libs -Wl,-rpath,${libdir})
endif()

extract_readme_example(${SOURCE_DIR} c-example c ${WORK_DIR}/readme_example.c)

set(c_flags -std=c11 -Wall -Wextra -Werror -pedantic -O1)
foreach(program c_api_test readme_example)
  if(program STREQUAL "c_api_test")
    set(source ${SOURCE_DIR}/tests/c_api/c_api_test.c)
  else()
    set(source ${WORK_DIR}/readme_example.c)
  endif()
  run(${CC} ${c_flags} ${cflags} ${source} -o ${WORK_DIR}/${program} ${libs} -lm)
endforeach()
if(LINKAGE STREQUAL "static")
  # Statically linked: the program needs no libflashattn.so at run time.
  run(ldd ${WORK_DIR}/c_api_test)
  if(output MATCHES "libflashattn")
    message(FATAL_ERROR "c_api_test links libflashattn dynamically:\n${output}")
  endif()
endif()

run(${CMAKE_COMMAND} -E env OMP_NUM_THREADS=2 ${WORK_DIR}/c_api_test ${VERSION})
message(STATUS "${output}")
run(${WORK_DIR}/readme_example)
message(STATUS "README C example printed:\n${output}")
if(NOT output MATCHES "O\\[token 0\\] = 0 ")
  message(FATAL_ERROR "README C example: expected 'O[token 0] = 0 ' (token 0 sees only key 0, whose V row is 0)")
endif()

if(LINKAGE STREQUAL "shared" AND PYTHON)
  file(GLOB shared_library ${libdir}/libflashattn.so.${VERSION})
  if(NOT shared_library)
    message(FATAL_ERROR "no libflashattn.so.${VERSION} in ${libdir}")
  endif()
  run(${CMAKE_COMMAND} -E env OMP_NUM_THREADS=2 ${PYTHON} ${SOURCE_DIR}/tests/c_api/ctypes_forward.py
      ${shared_library} ${VERSION})
  message(STATUS "${output}")
endif()
