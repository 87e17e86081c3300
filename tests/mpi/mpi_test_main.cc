// GoogleTest under mpirun: every rank runs every test (the tests are collective); a failure is printed by
// the rank that saw it, and the run fails if any rank failed.
#include <gtest/gtest.h>
#include <mpi.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int status = RUN_ALL_TESTS();
  int any_failed = 0;
  MPI_Allreduce(&status, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any_failed;
}
