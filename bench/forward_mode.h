// `flashattn bench --mode forward`: times flashattn::forward on random inputs, then the BLAS baseline on the
// same inputs, and reports one row.
#ifndef FLASHATTN_BENCH_FORWARD_MODE_H_
#define FLASHATTN_BENCH_FORWARD_MODE_H_

#include <cstdint>

#include "bench/bench_case.h"
#include "bench/fma_peak.h"
#include "bench/report.h"
#include "bench/timing.h"

namespace flashattn::bench {

struct RunOptions {
  TimingOptions timing;
  bool baseline = true;
  // The baseline is skipped when its scores alone would need more than this (N = 65536 needs 16 GiB a head).
  std::int64_t baseline_max_scratch_bytes = std::int64_t{4} << 30;
  // Measure the peak resident growth of the first (warm-up) call.
  bool report_memory = false;
};

Row RunForward(const BenchCase& c, const RunOptions& options, const FmaPeak& peak);

}  // namespace flashattn::bench

#endif  // FLASHATTN_BENCH_FORWARD_MODE_H_
