// The detected L2, and the ridge point from the two measurements of measure/measure.h.
#include "io_model/machine.h"

#include <omp.h>

#include "common/cpu_caches.h"
#include "measure/measure.h"

namespace flashattn::io_model {

L2Cache DetectedL2Cache() {
  const CacheSize l2 = DetectedCpuCaches().l2;
  return {l2.bytes, l2.detected()};
}

Machine MeasureMachine(int threads) {
  Machine machine;
  machine.threads = threads > 0 ? threads : omp_get_max_threads();
  machine.fma_gflops = measure::MeasureFmaPeak(machine.threads).cpu_gflops;
  machine.bandwidth_gbs =
      measure::MeasureBandwidth(machine.threads, measure::MainMemoryBytes(), /*trials=*/10)
          .read_gbs;
  return machine;
}

}  // namespace flashattn::io_model
