# Runs mpi_rank_exit twice under mpirun with 3 ranks (the last one exits in the middle of ring_forward):
#   1. as Open MPI runs jobs by default: the job must end, with a non-zero status, within seconds;
#   2. with orte_abort_on_non_zero_status 0 (the runtime lets the survivors run on): each survivor must
#      report flashattn's timeout Error after timeout_seconds = 3, well within the time limit.
#   cmake -DMPIEXEC=... -DPROGRAM=... -P run_rank_exit.cmake
cmake_minimum_required(VERSION 3.25)
set(ENV{OMPI_ALLOW_RUN_AS_ROOT} 1)
set(ENV{OMPI_ALLOW_RUN_AS_ROOT_CONFIRM} 1)
set(ENV{OMP_NUM_THREADS} 1)

execute_process(COMMAND ${MPIEXEC} --oversubscribe -np 3 ${PROGRAM} 3
                RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE output TIMEOUT 60)
if(status EQUAL 0 OR status MATCHES "timeout")
  message(FATAL_ERROR "a rank exited mid-call, yet the job ended with '${status}':\n${output}")
endif()
if(NOT output MATCHES "rank 2 exits in the middle of ring_forward")
  message(FATAL_ERROR "the exiting rank did not get into the call:\n${output}")
endif()
message(STATUS "default: the job ended with status ${status}")

execute_process(COMMAND ${MPIEXEC} --oversubscribe --mca orte_abort_on_non_zero_status 0 -np 3 ${PROGRAM} 3
                RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE output TIMEOUT 60)
if(status MATCHES "timeout")
  message(FATAL_ERROR "the survivors hung:\n${output}")
endif()
foreach(survivor 0 1)
  if(NOT output MATCHES "rank_exit: rank ${survivor}: ring_forward: rank ${survivor} waited more than timeout_seconds=3")
    message(FATAL_ERROR "rank ${survivor} did not report the timeout:\n${output}")
  endif()
endforeach()
message(STATUS "survivors reported the timeout:\n${output}")
