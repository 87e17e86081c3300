# Configures and generates the whole project with a multi-configuration generator (Ninja Multi-Config), as an IDE's
# generator or `cmake -G "Ninja Multi-Config"` would. Every file(GENERATE) must then write one content for all
# configurations (python/modules.txt once listed full paths, and this generator refused it). Nothing is built.
# Run as a script:
#   cmake -DSOURCE_DIR=... -DWORK_DIR=... -DMODULES=<this build's python/modules.txt, or empty>
#         -P configure_multi_config.cmake
# With MODULES, the multi-configuration build's modules.txt must list the same modules.
cmake_minimum_required(VERSION 3.25)

include(${CMAKE_CURRENT_LIST_DIR}/script_helpers.cmake)  # run()

foreach(var SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "configure_multi_config.cmake needs -D${var}=...")
  endif()
endforeach()
find_program(NINJA ninja)
if(NOT NINJA)
  message(FATAL_ERROR "ninja is missing (Debian's ninja-build; scripts/install-deps.sh installs it)")
endif()
file(REMOVE_RECURSE ${WORK_DIR})
run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR} -G "Ninja Multi-Config" -DCMAKE_MAKE_PROGRAM=${NINJA})
if(MODULES)
  file(READ ${MODULES} expected)
  if(NOT EXISTS ${WORK_DIR}/python/modules.txt)
    message(FATAL_ERROR "the multi-configuration build wrote no python/modules.txt")
  endif()
  file(READ ${WORK_DIR}/python/modules.txt listed)
  if(NOT listed STREQUAL expected)
    message(FATAL_ERROR "python/modules.txt lists\n${listed}in the multi-configuration build, and\n${expected}here")
  endif()
endif()
