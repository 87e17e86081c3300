// A rank that dies in the middle of a ring call: the last rank passes the collective check like
// ring_forward and then exits without MPI_Finalize; the others are inside ring_forward waiting for it.
// Run by tests/mpi/run_rank_exit.cmake: by default Open MPI's runtime ends the whole job as soon as a
// process exits without finalizing; when told not to (orte_abort_on_non_zero_status 0), every survivor
// gets flashattn's timeout Error after timeout_seconds (argv[1]) and prints it.
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "distributed/agreement.h"
#include "distributed/comm.h"
#include "distributed/ring.h"
#include "flashattn/distributed.h"
#include "flashattn/flashattn.h"

int main(int argc, char** argv) {
  using namespace flashattn;
  using namespace flashattn::distributed;
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const std::int64_t seqlen = 4096, heads = 4, dim = 64;
  const std::int64_t rows = shard_length(seqlen, world, rank, ShardLayout::kZigzag);
  std::vector<float> q(static_cast<std::size_t>(rows * heads * dim), 0.5f), o(q.size());
  RingParams params;
  AttentionParams& p = params.local;
  p.q = p.k = p.v = q.data();
  p.o = o.data();
  p.seqlen_q = p.seqlen_k = rows;
  p.heads_q = p.heads_kv = heads;
  p.head_dim = dim;
  p.causal = true;
  p.num_threads = 1;
  p.set_contiguous_strides();
  params.seqlen = seqlen;
  params.timeout_seconds = argc > 1 ? std::atof(argv[1]) : 10.0;
  if (rank == world - 1) {
    const CallComm comm(MPI_COMM_WORLD, "ring_forward", params.timeout_seconds);
    AgreeOrThrow(comm, RingFields(p, seqlen, params.layout), "");
    std::fprintf(stderr, "rank_exit: rank %d exits in the middle of ring_forward\n", rank);
    _exit(3);
  }
  try {
    ring_forward(params, MPI_COMM_WORLD);
    std::fprintf(stderr, "rank_exit: rank %d: ring_forward returned without the last rank\n", rank);
  } catch (const Error& error) {
    std::fprintf(stderr, "rank_exit: rank %d: %s\n", rank, error.what());
  }
  _exit(1);
}
