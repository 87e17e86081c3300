# flashattn::mpi (docs/distributed.md): one GoogleTest program run under mpirun with W = 1, 2, 3, 4 ranks
# (--oversubscribe: more ranks than this machine's cores), one thread per rank. Open MPI refuses to start
# as root unless OMPI_ALLOW_RUN_AS_ROOT and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM are set: the tests set both.
if(NOT TARGET flashattn_mpi)
  return()
endif()
add_executable(mpi_test
  ${CMAKE_CURRENT_LIST_DIR}/mpi/mpi_test_main.cc
  ${CMAKE_CURRENT_LIST_DIR}/mpi/mpi_test_support.cc
  ${CMAKE_CURRENT_LIST_DIR}/mpi/ring_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/mpi/sharded_decode_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/mpi/sharded_decode_packed_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/mpi/sharded_decode_sinks_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/mpi/sharded_decode_quantized_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/mpi/errors_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/mpi/units_test.cc
)
target_include_directories(mpi_test PRIVATE ${PROJECT_SOURCE_DIR}/src ${CMAKE_CURRENT_LIST_DIR}/mpi)
target_link_libraries(mpi_test PRIVATE flashattn::mpi flashattn_tools GTest::gtest)

set(flashattn_mpi_environment OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1)
foreach(world 1 2 3 4)
  add_test(NAME mpi_test_w${world}
           COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe ${MPIEXEC_NUMPROC_FLAG} ${world}
                   $<TARGET_FILE:mpi_test> --gtest_brief=1)
  set_tests_properties(mpi_test_w${world} PROPERTIES ENVIRONMENT "${flashattn_mpi_environment}" LABELS mpi
                                                     TIMEOUT 300 PROCESSORS ${world})
endforeach()

# A rank that exits in the middle of a call: the job must end with an error, not hang.
add_executable(mpi_rank_exit ${CMAKE_CURRENT_LIST_DIR}/mpi/rank_exit_main.cc)
target_include_directories(mpi_rank_exit PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(mpi_rank_exit PRIVATE flashattn::mpi)
add_test(NAME mpi_rank_exit_test
         COMMAND ${CMAKE_COMMAND} -DMPIEXEC=${MPIEXEC_EXECUTABLE} -DPROGRAM=$<TARGET_FILE:mpi_rank_exit>
                 -P ${CMAKE_CURRENT_LIST_DIR}/mpi/run_rank_exit.cmake)
set_tests_properties(mpi_rank_exit_test PROPERTIES LABELS mpi TIMEOUT 180 PROCESSORS 2)
