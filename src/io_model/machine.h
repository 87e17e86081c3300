// What `flashattn io` compares the model with: the fast memory the tiles are sized for (the per-core L2)
// and the machine's ridge point, FMA peak / main-memory bandwidth, both measured in a fraction of a second.
// An algorithm whose arithmetic intensity (FLOPs per byte) is below the ridge point is bound by memory.
#ifndef FLASHATTN_IO_MODEL_MACHINE_H_
#define FLASHATTN_IO_MODEL_MACHINE_H_

#include <cstdint>

namespace flashattn::io_model {

// Per-core L2 size in bytes from sysconf, else from /sys/devices/system/cpu/cpu0/cache; 0 if neither knows.
std::int64_t DetectL2CacheBytes();

struct Machine {
  int threads = 0;
  double fma_gflops = 0.0;     // independent FMA chains, best short piece per thread, summed over threads
  double bandwidth_gbs = 0.0;  // streaming reads of 96 MiB, median piece per thread, summed over threads
  double RidgePoint() const { return bandwidth_gbs > 0 ? fma_gflops / bandwidth_gbs : 0.0; }  // FLOP/byte
};

// Measures both with `threads` threads (0 = all cores). Each thread times short pieces of work so that other
// jobs on the same cores disturb few of them; the per-thread rates are summed, which assumes the threads
// could run at once (for bandwidth it may overstate what the cores reach together on a shared bus).
Machine MeasureMachine(int threads);

}  // namespace flashattn::io_model

#endif  // FLASHATTN_IO_MODEL_MACHINE_H_
