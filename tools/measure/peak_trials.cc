#include "measure/peak_trials.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <ctime>

namespace flashattn::measure {

namespace {

// CPU time of the calling thread. Read by each thread itself, it includes the running time slice, which the
// process-wide clock may not yet have accounted for threads running on other cores.
double ThreadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

}  // namespace

PeakRates BestTrialRates(int threads, double seconds, const RunChains& run) {
  using Clock = std::chrono::steady_clock;
  double ops_per_thread = 0;
  run(1 << 16, &ops_per_thread);  // warm-up

  const auto probe_start = Clock::now();
  run(1 << 20, &ops_per_thread);
  const double probe_s = std::chrono::duration<double>(Clock::now() - probe_start).count();
  const std::int64_t iterations =
      std::max<std::int64_t>(1 << 16, static_cast<std::int64_t>((1 << 20) * 0.02 / std::max(probe_s, 1e-6)));

  PeakRates best;
  volatile double sink = 0;  // keeps the chains' results alive
  const auto start = Clock::now();
  int trials = 0;
  while (trials < 3 || std::chrono::duration<double>(Clock::now() - start).count() < seconds) {
    double trial_ops = 0;
    double trial_s = 0;
    double checksum = 0;
    double cpu_rate = 0;  // Σ over threads of ops / own CPU seconds
#pragma omp parallel num_threads(threads) reduction(+ : trial_ops, checksum, cpu_rate)
    {
      Clock::time_point t0;
#pragma omp barrier
#pragma omp master
      t0 = Clock::now();
      double ops = 0;
      const double cpu_start = ThreadCpuSeconds();
      checksum += run(iterations, &ops);
      const double cpu_s = ThreadCpuSeconds() - cpu_start;
      trial_ops += ops;
      if (cpu_s > 0) cpu_rate += ops / cpu_s;
#pragma omp barrier
#pragma omp master
      trial_s = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    sink = sink + checksum;
    best.wall_gops = std::max(best.wall_gops, trial_ops / trial_s * 1e-9);
    best.cpu_gops = std::max(best.cpu_gops, cpu_rate * 1e-9);
    ++trials;
  }
  return best;
}

}  // namespace flashattn::measure
