#include "bench/timing.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>

namespace flashattn::bench {

double Median(std::vector<double> samples) {
  if (samples.empty()) return 0;
  const std::size_t mid = samples.size() / 2;
  std::nth_element(samples.begin(), samples.begin() + mid, samples.end());
  if (samples.size() % 2 == 1) return samples[mid];
  const double upper = samples[mid];
  const double lower = *std::max_element(samples.begin(), samples.begin() + mid);
  return (lower + upper) / 2;
}

Timing Summarize(const std::vector<double>& samples_ms, const std::vector<double>& cpu_samples_ms) {
  Timing t;
  t.median_cpu_ms = Median(cpu_samples_ms);
  if (samples_ms.empty()) return t;
  t.median_ms = Median(samples_ms);
  t.min_ms = *std::min_element(samples_ms.begin(), samples_ms.end());
  t.max_ms = *std::max_element(samples_ms.begin(), samples_ms.end());
  t.runs = static_cast<int>(samples_ms.size());
  return t;
}

Timing TimeCalls(const std::function<void()>& call, const TimingOptions& options) {
  using Clock = std::chrono::steady_clock;
  const auto prepare = [&] {
    if (options.before_each) options.before_each();
  };
  if (options.warmup) {
    prepare();
    call();
  }
  std::vector<double> samples_ms, cpu_samples_ms;
  double total_s = 0;
  while (static_cast<int>(samples_ms.size()) < options.max_repeats &&
         (static_cast<int>(samples_ms.size()) < options.repeats || total_s < options.min_time_s)) {
    const auto prepare_start = Clock::now();
    prepare();
    total_s += std::chrono::duration<double>(Clock::now() - prepare_start).count();
    const double cpu_start = ProcessCpuSeconds();
    const auto start = Clock::now();
    call();
    const std::chrono::duration<double> elapsed = Clock::now() - start;
    cpu_samples_ms.push_back((ProcessCpuSeconds() - cpu_start) * 1e3);
    samples_ms.push_back(elapsed.count() * 1e3);
    total_s += elapsed.count();
  }
  return Summarize(samples_ms, cpu_samples_ms);
}

double ProcessCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

std::optional<double> LoadAverage1m() {
  std::ifstream file("/proc/loadavg");
  double load = 0;
  if (!(file >> load)) return std::nullopt;
  return load;
}

}  // namespace flashattn::bench
