// What `flashattn io` compares the model with: the fast memory the tiles are sized for (the per-core L2)
// and the machine's ridge point, FMA peak / main-memory bandwidth, both measured in a fraction of a second.
// An algorithm whose arithmetic intensity (FLOPs per byte) is below the ridge point is bound by memory.
#ifndef FLASHATTN_TOOLS_IO_MODEL_MACHINE_H_
#define FLASHATTN_TOOLS_IO_MODEL_MACHINE_H_

#include <cstdint>

namespace flashattn::io_model {

// The per-core L2 the fused kernel sizes its blocks from (the one detection of src/common/cpu_caches.h):
// `flashattn io`'s fast memory M unless --fast-memory is given. `detected` is false when the operating
// system did not report it and the documented default stands.
struct L2Cache {
  std::int64_t bytes = 0;
  bool detected = false;
};
L2Cache DetectedL2Cache();

struct Machine {
  int threads = 0;
  double fma_gflops = 0.0;     // FmaPeak::cpu_gflops of measure/measure.h (per CPU time: robust to sharing)
  double bandwidth_gbs = 0.0;  // Bandwidth::read_gbs of measure/measure.h (all threads at once), arrays of
                               // measure::MainMemoryBytes()
  double RidgePoint() const { return bandwidth_gbs > 0 ? fma_gflops / bandwidth_gbs : 0.0; }  // FLOP/byte
};

// Measures both with `threads` threads (0 = all cores), with the measurements `flashattn bench` uses.
Machine MeasureMachine(int threads);

}  // namespace flashattn::io_model

#endif  // FLASHATTN_TOOLS_IO_MODEL_MACHINE_H_
