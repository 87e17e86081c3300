#include "bench/forward_mode.h"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "bench/baseline.h"
#include "bench/memory.h"
#include "common/element.h"

namespace flashattn::bench {

namespace {

// The caller-owned tensors of one forward call, filled and resident before anything is measured.
class Tensors {
 public:
  Tensors(const AttentionParams& p, std::uint64_t seed)
      : q_(Filled(p.batch * p.seqlen_q * p.heads_q * p.head_dim, p.dtype, seed)),
        k_(Filled(p.batch * p.seqlen_k * p.heads_kv * p.head_dim, p.dtype, seed + 1)),
        v_(Filled(p.batch * p.seqlen_k * p.heads_kv * p.HeadDimV(), p.dtype, seed + 2)),
        o_(Filled(p.batch * p.seqlen_q * p.heads_q * p.HeadDimV(), p.dtype, 0)),
        lse_(static_cast<std::size_t>(p.batch * p.heads_q * p.seqlen_q), 0.0f) {}

  void Attach(AttentionParams& p) {
    p.q = q_.data();
    p.k = k_.data();
    p.v = v_.data();
    p.o = o_.data();
    p.lse = lse_.data();
  }
  std::int64_t OutputSlots() const { return static_cast<std::int64_t>(o_.size()); }
  std::int64_t Bytes() const {
    return static_cast<std::int64_t>((q_.size() + k_.size() + v_.size() + o_.size()) * sizeof(std::uint16_t) +
                                     lse_.size() * sizeof(float));
  }

 private:
  // n elements of `dtype` (float32 takes two 16-bit slots), uniform in [−√3, √3) (unit variance) from a
  // counter hash, or all zero for seed 0.
  static std::vector<std::uint16_t> Filled(std::int64_t n, DType dtype, std::uint64_t seed) {
    std::vector<std::uint16_t> data(static_cast<std::size_t>(n * (dtype == DType::kF32 ? 2 : 1)), 0);
    if (seed == 0) return data;
    for (std::int64_t i = 0; i < n; ++i) {
      std::uint64_t x = (seed << 40) ^ static_cast<std::uint64_t>(i);  // splitmix64 finalizer
      x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
      x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
      x ^= x >> 31;
      const float unit = static_cast<float>(x >> 40) * 0x1p-24f;  // [0, 1)
      StoreFromFloat(data.data(), dtype, i, (2 * unit - 1) * 1.7320508f);
    }
    return data;
  }

  std::vector<std::uint16_t> q_, k_, v_, o_;
  std::vector<float> lse_;
};

double MaxAbsDiff(const AttentionParams& a, const AttentionParams& b) {
  const std::int64_t n = a.batch * a.seqlen_q * a.heads_q * a.HeadDimV();
  double diff = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double d = std::abs(static_cast<double>(LoadAsFloat(a.o, a.dtype, i)) - LoadAsFloat(b.o, b.dtype, i));
    diff = std::isnan(d) ? d : std::max(diff, d);
    if (std::isnan(diff)) break;
  }
  return diff;
}

std::optional<BaselineResult> TimeBaseline(const AttentionParams& params, const RunOptions& options,
                                           std::string* note) {
  BaselineResult result;
  for (BaselineArrangement arrangement : kAllArrangements) {
    // With one thread both arrangements are the same program.
    if (params.num_threads == 1 && arrangement == BaselineArrangement::kThreadedBlas) continue;
    const std::int64_t scratch = BlasBaseline::ScratchBytes(params, arrangement);
    if (scratch > options.baseline_max_scratch_bytes) {
      *note += std::string(note->empty() ? "" : "; ") + std::string(ToString(arrangement)) +
               " baseline skipped: needs " + std::to_string(scratch >> 20) + " MiB of scratch";
      continue;
    }
    BlasBaseline baseline(params, arrangement);
    const Timing timing = TimeCalls([&] { baseline.Run(); }, options.timing);
    if (arrangement == BaselineArrangement::kThreadedBlas) {
      // OpenBLAS's idle workers spin for a while before they sleep; let them, so they do not steal cores
      // from whatever is timed next.
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    result.medians_ms.emplace_back(ToString(arrangement), timing.median_ms);
    if (result.arrangement.empty() || timing.median_ms < result.timing.median_ms) {
      result.timing = timing;
      result.arrangement = ToString(arrangement);
    }
  }
  if (result.arrangement.empty()) return std::nullopt;
  return result;
}

}  // namespace

Row RunForward(const BenchCase& c, const RunOptions& options, const FmaPeak& peak) {
  Row row;
  row.config = c;
  row.flops = CountFlops(c);
  row.peak_gflops = peak.gflops;
  row.peak_cpu_gflops = peak.cpu_gflops;
  row.peak_target = peak.target;
  row.load_average = LoadAverage1m();

  AttentionParams params = c.Params();
  Tensors tensors(params, 0x5eed);
  tensors.Attach(params);
  Validate(params);
  row.tensor_bytes = tensors.Bytes();

  const auto call = [&] {
    if (c.algorithm) forward(params, *c.algorithm); else forward(params);
  };
  TimingOptions timing = options.timing;
  if (options.report_memory) {
    // Heap pages that earlier rows freed go back to the kernel first, or scratch reusing them would not
    // show; every tensor above is resident, so only the call's own memory counts.
    malloc_trim(0);
    const PeakRssProbe probe;
    call();
    if (probe.available()) row.peak_rss_growth_bytes = probe.PeakGrowthBytes();
    else row.note = "peak RSS unavailable (/proc/self/clear_refs not writable)";
    timing.warmup = false;  // that call was the warm-up
  }
  row.timing = TimeCalls(call, timing);

  if (options.baseline) {
    AttentionParams baseline_params = params;  // same inputs, its own O and LSE
    std::vector<std::uint16_t> o(static_cast<std::size_t>(tensors.OutputSlots()), 0);
    std::vector<float> lse(static_cast<std::size_t>(params.batch * params.heads_q * params.seqlen_q), 0.0f);
    baseline_params.o = o.data();
    baseline_params.lse = lse.data();
    row.baseline = TimeBaseline(baseline_params, options, &row.note);
    if (row.baseline) row.max_abs_diff_vs_baseline = MaxAbsDiff(params, baseline_params);
  }
  return row;
}

}  // namespace flashattn::bench
