#include "bench/mode_common.h"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "bench/blas_core.h"
#include "support/elements.h"

namespace flashattn::bench {

std::vector<float> SinkLogits(const BenchCase& c) {
  return c.sinks ? std::vector<float>(static_cast<std::size_t>(c.heads), 0.5f) : std::vector<float>();
}

std::vector<std::uint16_t> RandomElements(std::int64_t n, DType dtype, std::uint64_t seed) {
  std::vector<std::uint16_t> data(static_cast<std::size_t>(n * (dtype == DType::kF32 ? 2 : 1)), 0);
  if (seed == 0) return data;
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint64_t x = (seed << 40) ^ static_cast<std::uint64_t>(i);  // splitmix64 finalizer
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
    const float unit = static_cast<float>(x >> 40) * 0x1p-24f;  // [0, 1)
    support::StoreFromFloat(data.data(), dtype, i, (2 * unit - 1) * 1.7320508f);
  }
  return data;
}

double MaxAbsDiff(const void* a, DType a_dtype, const void* b, DType b_dtype, std::int64_t n) {
  double diff = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double d = std::abs(static_cast<double>(support::LoadAsFloat(a, a_dtype, i)) -
                              support::LoadAsFloat(b, b_dtype, i));
    if (std::isnan(d)) return d;
    diff = std::max(diff, d);
  }
  return diff;
}

std::optional<BaselineResult> TimeArrangements(int threads, const TimingOptions& timing,
                                               const PrepareBaseline& prepare, std::string* note) {
  BaselineResult result;
  for (BaselineArrangement arrangement : kAllArrangements) {
    // With one thread both arrangements are the same program.
    if (threads == 1 && arrangement == BaselineArrangement::kThreadedBlas) continue;
    std::string skip_reason;
    const std::function<void()> call = prepare(arrangement, &skip_reason);
    if (!call) {
      *note += std::string(note->empty() ? "" : "; ") + std::string(ToString(arrangement)) +
               " baseline skipped: " + skip_reason;
      continue;
    }
    const Timing t = TimeCalls(call, timing);
    if (arrangement == BaselineArrangement::kThreadedBlas) {
      // OpenBLAS's idle workers spin for a while before they sleep; let them, so they do not steal cores
      // from whatever is timed next.
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    result.medians_ms.emplace_back(ToString(arrangement), t.median_ms);
    if (result.arrangement.empty() || t.median_ms < result.timing.median_ms) {
      result.timing = t;
      result.arrangement = ToString(arrangement);
    }
  }
  if (result.arrangement.empty()) return std::nullopt;
  result.blas_core = BlasCore();
  return result;
}

void TimeLibraryCall(const std::function<void()>& call, const RunOptions& options, Row* row) {
  TimingOptions timing = options.timing;
  if (options.report_memory) {
    // Heap pages that earlier rows freed go back to the kernel first, or scratch reusing them would not
    // show; every tensor of the row is resident, so only the call's own memory counts.
    malloc_trim(0);
    const measure::PeakRssProbe probe;
    call();
    if (probe.available()) row->peak_rss_growth_bytes = probe.PeakGrowthBytes();
    else row->note = "peak RSS unavailable (/proc/self/clear_refs not writable)";
    timing.warmup = false;  // that call was the warm-up
  }
  row->timing = TimeCalls(call, timing);
}

Row StartRow(const BenchCase& c, const Limits& limits) {
  Row row;
  row.config = c;
  row.flops = CountFlops(c);
  row.peak_gflops = limits.peak.gflops;
  row.peak_cpu_gflops = limits.peak.cpu_gflops;
  row.peak_target = limits.peak.target;
  row.load_average = LoadAverage1m();
  return row;
}

}  // namespace flashattn::bench
