// flashattn-ring: times context parallelism over MPI on one shape and checks it against one process.
//   mpirun -np W flashattn-ring --seqlen N --heads H --head-dim d --causal --layout zigzag --threads 1
//   mpirun -np W flashattn-ring --mode decode --cache-len N --heads 32 --heads-kv 8 --dtype f16
// docs/distributed.md explains the output and the simulation that reads its --json file.
#ifndef FLASHATTN_BENCH_RING_RING_BENCH_H_
#define FLASHATTN_BENCH_RING_RING_BENCH_H_

#include <cstdint>
#include <string>

#include "flashattn/distributed.h"
#include "flashattn/flashattn.h"

namespace flashattn::ring_bench {

struct Options {
  std::string mode = "ring";  // ring (forward and backward) or decode
  std::int64_t batch = 1, seqlen = 16384, heads = 8, heads_kv = 0, head_dim = 128;
  bool causal = false;
  std::int64_t window_left = -1, window_right = -1;
  std::string layout = "zigzag";
  std::string dtype = "f32";
  int threads = 1;         // per rank
  int single_threads = 0;  // for the single-process comparison on rank 0; 0 = threads × W
  int repeats = 3;         // timed calls after one warm-up; medians are reported
  bool backward = true;
  bool check = true;
  bool compare = true;  // time one process on the whole problem too
  std::string json;     // write the measurements here
  // decode
  std::int64_t cache_len = 131072, seqlen_q = 1, num_splits = 0;

  DType Dtype() const;
  std::int64_t HeadsKv() const { return heads_kv > 0 ? heads_kv : heads; }
};

// Each returns the process's exit status (non-zero if the check failed), the same on every rank.
int RunRing(const Options& options);
int RunDecode(const Options& options);

}  // namespace flashattn::ring_bench

#endif  // FLASHATTN_BENCH_RING_RING_BENCH_H_
