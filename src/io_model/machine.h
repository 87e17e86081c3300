// What `flashattn io` compares the model with: the fast memory the tiles are sized for (the per-core L2)
// and the machine's ridge point, FMA peak / main-memory bandwidth, both measured in a fraction of a second.
// An algorithm whose arithmetic intensity (FLOPs per byte) is below the ridge point is bound by memory.
#ifndef FLASHATTN_IO_MODEL_MACHINE_H_
#define FLASHATTN_IO_MODEL_MACHINE_H_

#include <cstdint>

namespace flashattn::io_model {

// Bytes per array of the bandwidth measurement behind the ridge point: 128 MiB (MeasureBandwidth's
// default), or twice the L3 when that is larger, so that the array read cannot stay in the cache (a 260 MiB
// L3 holds a 128 MiB array, and the "main-memory" rate measured from it is twice the DRAM's).
std::int64_t RidgeArrayBytes(std::int64_t l3_bytes);

struct Machine {
  int threads = 0;
  double fma_gflops = 0.0;     // FmaPeak::cpu_gflops of io_model/measure.h (per CPU time: robust to sharing)
  double bandwidth_gbs = 0.0;  // Bandwidth::read_gbs of io_model/measure.h (all threads at once), arrays of
                               // RidgeArrayBytes(DetectedCpuCaches().l3.bytes)
  double RidgePoint() const { return bandwidth_gbs > 0 ? fma_gflops / bandwidth_gbs : 0.0; }  // FLOP/byte
};

// Measures both with `threads` threads (0 = all cores), with the measurements `flashattn bench` uses.
Machine MeasureMachine(int threads);

}  // namespace flashattn::io_model

#endif  // FLASHATTN_IO_MODEL_MACHINE_H_
