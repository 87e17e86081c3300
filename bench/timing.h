// The measurement loop: one untimed warm-up call, then timed calls until both a minimum count and a minimum
// total time are reached. The machine is shared, so the median is reported, never the mean.
#ifndef FLASHATTN_BENCH_TIMING_H_
#define FLASHATTN_BENCH_TIMING_H_

#include <functional>
#include <optional>
#include <vector>

namespace flashattn::bench {

struct TimingOptions {
  int repeats = 5;          // at least this many timed calls
  double min_time_s = 0.5;  // and keep calling until their total (with before_each's) reaches this
  int max_repeats = 1000;   // but never more calls than this
  bool warmup = true;       // one untimed call first (page faults, thread start-up, cache warm-up)
  // Untimed, before every call (the warm-up too) when set: decode evicts the CPU caches with it. Its time
  // counts towards min_time_s, so that a short call after a long eviction is not repeated max_repeats times.
  std::function<void()> before_each;
};

struct Timing {
  double median_ms = 0;  // wall clock
  double min_ms = 0;
  double max_ms = 0;
  int runs = 0;
  // CPU time of the whole process per call (all threads, spinning included). On a machine shared with other
  // jobs, median_cpu_ms / threads estimates the wall time the call would take with its cores to itself.
  double median_cpu_ms = 0;
};

// Median of `samples` (mean of the two middle values for an even count); 0 for no samples.
double Median(std::vector<double> samples);

Timing Summarize(const std::vector<double>& samples_ms, const std::vector<double>& cpu_samples_ms = {});

// CPU time consumed so far by every thread of this process, in seconds.
double ProcessCpuSeconds();

// Times `call` as described above.
Timing TimeCalls(const std::function<void()>& call, const TimingOptions& options);

// The 1-minute load average (/proc/loadavg): runnable threads competing for the cores. Reported with each
// row so that a reader can tell a quiet machine's numbers from a busy one's. nullopt where unavailable.
std::optional<double> LoadAverage1m();

}  // namespace flashattn::bench

#endif  // FLASHATTN_BENCH_TIMING_H_
