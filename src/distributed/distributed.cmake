# flashattn::mpi (libflashattn_mpi): context parallelism over MPI, a library of its own so that the core
# library keeps no MPI dependency. Built when MPI's C++ compiler wrapper's settings are found
# (Debian: libopenmpi-dev); FLASHATTN_ENABLE_MPI=OFF skips it. Included by the top-level CMakeLists.txt.
find_package(MPI COMPONENTS CXX QUIET)
option(FLASHATTN_ENABLE_MPI "Build flashattn::mpi (needs MPI)" ${MPI_CXX_FOUND})
if(NOT FLASHATTN_ENABLE_MPI)
  return()
endif()
if(NOT MPI_CXX_FOUND)
  message(FATAL_ERROR "FLASHATTN_ENABLE_MPI is ON but MPI was not found: run scripts/install-deps.sh")
endif()

add_library(flashattn_mpi
  ${CMAKE_CURRENT_LIST_DIR}/agreement.cc
  ${CMAKE_CURRENT_LIST_DIR}/block.cc
  ${CMAKE_CURRENT_LIST_DIR}/comm.cc
  ${CMAKE_CURRENT_LIST_DIR}/element_cast.cc
  ${CMAKE_CURRENT_LIST_DIR}/layout.cc
  ${CMAKE_CURRENT_LIST_DIR}/ring.cc
  ${CMAKE_CURRENT_LIST_DIR}/ring_backward.cc
  ${CMAKE_CURRENT_LIST_DIR}/ring_forward.cc
  ${CMAKE_CURRENT_LIST_DIR}/ring_plan.cc
  ${CMAKE_CURRENT_LIST_DIR}/running_state.cc
  ${CMAKE_CURRENT_LIST_DIR}/sharded_decode.cc
)
add_library(flashattn::mpi ALIAS flashattn_mpi)
set_target_properties(flashattn_mpi PROPERTIES EXPORT_NAME mpi POSITION_INDEPENDENT_CODE ON
                                               VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR})
# Its sources see the public headers and each other (src/distributed/), never the core library's internals.
target_include_directories(flashattn_mpi PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(flashattn_mpi PUBLIC flashattn::flashattn MPI::MPI_CXX)
target_compile_options(flashattn_mpi PRIVATE -Wall -Wextra)
