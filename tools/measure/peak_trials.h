// The trial loop of the arithmetic peaks (FMA, int8 dot products): every thread runs the same chains of
// instructions at once, trial after trial, and the best trial is kept, as STREAM keeps its best: the slower
// trials are the ones other jobs on the machine disturbed.
#ifndef FLASHATTN_TOOLS_MEASURE_PEAK_TRIALS_H_
#define FLASHATTN_TOOLS_MEASURE_PEAK_TRIALS_H_

#include <cstdint>
#include <functional>

namespace flashattn::measure {

// One thread's share of a trial: `iterations` updates of each chain; returns a checksum of the chains (kept
// alive, so that the compiler cannot drop them) and sets *ops to the operations performed.
using RunChains = std::function<double(std::int64_t iterations, double* ops)>;

struct PeakRates {
  double wall_gops = 0;  // best trial: all threads' operations / its wall-clock seconds
  double cpu_gops = 0;   // best trial: Σ over threads of (its operations / its own CPU seconds)
};

// Sizes a trial to about 20 ms of one thread's work, then runs trials on `threads` threads until at least three
// have run and `seconds` have passed.
PeakRates BestTrialRates(int threads, double seconds, const RunChains& run);

}  // namespace flashattn::measure

#endif  // FLASHATTN_TOOLS_MEASURE_PEAK_TRIALS_H_
