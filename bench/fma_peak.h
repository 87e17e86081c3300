// The machine's arithmetic limit, measured rather than looked up: every thread runs many independent chains
// of fused multiply-adds on full vectors of float32, the best the widest SIMD target this CPU supports can do
// (Highway picks it at run time, so a CPU without AVX2 runs the SSE4 or scalar code instead of crashing).
#ifndef FLASHATTN_BENCH_FMA_PEAK_H_
#define FLASHATTN_BENCH_FMA_PEAK_H_

#include <cstdint>
#include <string>

namespace flashattn::bench {

struct FmaPeak {
  double gflops = 0;   // best rate over the trials, all threads together (wall clock)
  // Best rate per CPU time: Σ over threads of (its flops / its own CPU seconds). Close to `gflops` on an idle
  // machine, and still the machine's peak when other jobs take turns on the cores.
  double cpu_gflops = 0;
  int threads = 0;
  std::string target;  // Highway target that ran, e.g. "AVX2"
};

// Runs `threads` threads of FMA chains for about `seconds` in total and reports the best trial.
FmaPeak MeasureFmaPeak(int threads, double seconds = 0.3);

// One thread's work: kFmaChains vectors x_c, started at x_c = c + 1 in every lane, each updated
// `iterations` times by x ← x·a + b, summed over chains and lanes. Returns that sum and sets *flops to the
// operations performed (2 per lane per update). Exposed so a test can check the chains really ran.
inline constexpr int kFmaChains = 12;
double RunFmaChains(std::int64_t iterations, float a, float b, double* flops);

}  // namespace flashattn::bench

#endif  // FLASHATTN_BENCH_FMA_PEAK_H_
