// The measuring parts of the benchmark, checked on what they compute rather than on how fast: the median
// loop's call counts, the peak-RSS probe against a known allocation, the FMA chains and the int8 dot-product
// chains (on every target) against their closed forms, and the baseline's vectorized safe softmax against
// scalar code. (The baseline's row conversions are the library's: tests/support_test.cc.)
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "bench/baseline_softmax.h"
#include "bench/timing.h"
#include "common/cpu_caches.h"
#include "measure/measure.h"
#include "simd/targets.h"
#include "test_targets.h"

namespace flashattn::bench {
namespace {

using measure::FmaPeak;
using measure::kFmaChains;
using measure::MeasureFmaPeak;
using measure::PeakRssProbe;
using measure::RunFmaChains;
using measure::StatusFieldKib;

TEST(Timing, MedianOfOddEvenAndEmpty) {
  EXPECT_EQ(Median({5, 1, 3}), 3);
  EXPECT_EQ(Median({4, 1, 3, 2}), 2.5);
  EXPECT_EQ(Median({7}), 7);
  EXPECT_EQ(Median({}), 0);
}

TEST(Timing, SummarizeKeepsMedianMinMaxAndCount) {
  const Timing t = Summarize({3, 9, 1, 4, 100});
  EXPECT_EQ(t.median_ms, 4);
  EXPECT_EQ(t.min_ms, 1);
  EXPECT_EQ(t.max_ms, 100);
  EXPECT_EQ(t.runs, 5);
}

TEST(Timing, RunsOneWarmUpThenTheRequestedCount) {
  int calls = 0;
  TimingOptions options;
  options.repeats = 3;
  options.min_time_s = 0;
  const Timing t = TimeCalls([&] { ++calls; }, options);
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(t.runs, 3);
  options.warmup = false;
  calls = 0;
  EXPECT_EQ(TimeCalls([&] { ++calls; }, options).runs, 3);
  EXPECT_EQ(calls, 3);
}

TEST(Timing, RunsTheUntimedStepBeforeEveryCall) {
  std::string order;
  TimingOptions options;
  options.repeats = 3;
  options.min_time_s = 0;
  options.before_each = [&] { order += 'e'; };
  EXPECT_EQ(TimeCalls([&] { order += 'c'; }, options).runs, 3);
  EXPECT_EQ(order, "ecececec");  // the warm-up, then three timed calls
}

// The untimed step's time counts towards the minimum time: 20 ms steps reach 50 ms in at most three calls.
TEST(Timing, CountsTheUntimedStepTowardsTheMinimumTime) {
  TimingOptions options;
  options.repeats = 1;
  options.min_time_s = 0.05;
  options.max_repeats = 50;
  options.warmup = false;
  options.before_each = [] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); };
  const Timing t = TimeCalls([] {}, options);
  EXPECT_GE(t.runs, 1);
  EXPECT_LE(t.runs, 3);
  EXPECT_LT(t.min_ms, 20.0);  // the step is not in the calls' times
}

TEST(Timing, KeepsCallingUntilTheMinimumTimeButNotPastTheCap) {
  int calls = 0;
  TimingOptions options;
  options.repeats = 1;
  options.min_time_s = 3600;  // never reached: the cap stops the loop
  options.max_repeats = 20;
  options.warmup = false;
  EXPECT_EQ(TimeCalls([&] { ++calls; }, options).runs, 20);
  EXPECT_EQ(calls, 20);
}

TEST(Timing, LoadAverageIsReadOnLinux) {
  const std::optional<double> load = LoadAverage1m();
  ASSERT_TRUE(load.has_value());
  EXPECT_GE(*load, 0.0);
}

TEST(Memory, ParsesStatusFields) {
  const char* status = "Name:\tbench\nVmPeak:\t  999 kB\nVmHWM:\t    2048 kB\nVmRSS:\t    1024 kB\n";
  EXPECT_EQ(StatusFieldKib(status, "VmHWM"), 2048);
  EXPECT_EQ(StatusFieldKib(status, "VmRSS"), 1024);
  EXPECT_EQ(StatusFieldKib(status, "VmSwap"), std::nullopt);
  EXPECT_EQ(StatusFieldKib(status, "Vm"), std::nullopt);  // a prefix of a key is not the key
  EXPECT_EQ(StatusFieldKib("VmHWM:\n", "VmHWM"), std::nullopt);
}

TEST(Memory, ProbeSeesATouchedAllocationAndNotAnUntouchedOne) {
  constexpr std::int64_t kBytes = 64 << 20;
  {
    const PeakRssProbe probe;
    if (!probe.available()) GTEST_SKIP() << "/proc/self/clear_refs is not writable here";
    std::vector<char> untouched;
    untouched.reserve(kBytes);  // mapped, never written: not resident
    EXPECT_LT(probe.PeakGrowthBytes(), kBytes / 4);
  }
  const PeakRssProbe probe;
  {
    std::vector<char> touched(kBytes, 1);
    EXPECT_EQ(touched[kBytes / 2], 1);
  }
  // The peak survives the free; pages the process released meanwhile may offset it by a few KiB.
  const std::int64_t growth = probe.PeakGrowthBytes();
  EXPECT_GE(growth, kBytes - (1 << 20));
  EXPECT_LT(growth, kBytes + (16 << 20));
}

TEST(FmaPeak, ChainsComputeTheClosedFormAndCountTheirFlops) {
  // x_n = aⁿ·x_0 + b·(1 − aⁿ)/(1 − a) for x_0 = 1..12 in every lane.
  const float a = 0.999f, b = 0.002f;
  const std::int64_t n = 1000;
  double flops = 0;
  const double sum = RunFmaChains(n, a, b, &flops);
  const double an = std::pow(static_cast<double>(a), n);
  double per_lane = 0;
  for (int c = 1; c <= kFmaChains; ++c) per_lane += an * c + b * (1 - an) / (1 - a);
  const double lanes = flops / (2.0 * kFmaChains * n);
  EXPECT_TRUE(lanes == 1 || lanes == 4 || lanes == 8 || lanes == 16) << lanes;
  EXPECT_NEAR(sum, per_lane * lanes, 1e-3 * per_lane * lanes);
}

TEST(FmaPeak, MeasuresAPositiveRateOnOneThread) {
  const FmaPeak peak = MeasureFmaPeak(1, 0.05);
  EXPECT_GT(peak.gflops, 0);
  EXPECT_TRUE(std::isfinite(peak.gflops));
  EXPECT_EQ(peak.threads, 1);
  EXPECT_FALSE(peak.target.empty());
}

// Each chain adds products_per_lane products u·s to every int32 lane per update: after n updates the sum over
// 12 chains and L lanes is L·(1 + … + 12) + 12·L·n·products·u·s. The instruction each target runs adds 4
// products per lane (vpdpbusd, SDOT), 2 (int16 pairs), or 1 (the scalar target).
TEST(Int8DotPeak, ChainsComputeTheClosedFormOnEveryTarget) {
  const std::uint8_t u = 3;
  const std::int8_t s = -2;
  const std::int64_t n = 1000;
  for (const std::int64_t target : testing::TargetsUnderTest(measure::Int8DotTargets())) {
    simd::RestrictTargetForTest(target);
    const std::string name = simd::TargetName(target);
    SCOPED_TRACE(name);
    const measure::Int8DotChainsRun run = measure::RunInt8DotChains(n, u, s);
    EXPECT_EQ(run.target, name);
    const int expected_products = name == "AVX3_DL" || name.rfind("SVE", 0) == 0 ? 4 : name == "SCALAR" ? 1 : 2;
    EXPECT_EQ(run.products_per_lane, expected_products);
    EXPECT_TRUE(run.lanes == 1 || run.lanes == 4 || run.lanes == 8 || run.lanes == 16) << run.lanes;
    EXPECT_EQ(run.sum, run.lanes * (78 + measure::kInt8DotChains * n * run.products_per_lane * u * s));
    EXPECT_EQ(run.ops, 2.0 * run.products_per_lane * run.lanes * measure::kInt8DotChains * n);
    EXPECT_EQ(run.integer_pv, name != "SCALAR" && name.rfind("SVE", 0) != 0);
    // Zero updates leave the starting values: the sum above is the chains' work, not a constant.
    EXPECT_EQ(measure::RunInt8DotChains(0, u, s).sum, run.lanes * 78);
  }
  simd::RestrictTargetForTest(0);
}

TEST(Int8DotPeak, MeasuresAPositiveRateOnOneThread) {
  const measure::Int8DotPeak peak = measure::MeasureInt8DotPeak(1, 0.05);
  EXPECT_GT(peak.gops, 0);
  EXPECT_TRUE(std::isfinite(peak.gops));
  EXPECT_GT(peak.cpu_gops, 0);
  EXPECT_EQ(peak.threads, 1);
  EXPECT_FALSE(peak.target.empty());
  EXPECT_FALSE(peak.instruction.empty());
}

TEST(Bandwidth, KernelsComputeTheSumAndTheTriadOnTheirRange) {
  std::vector<std::uint64_t> words(1003);
  for (std::size_t i = 0; i < words.size(); ++i) words[i] = i * i;
  std::uint64_t expected = 0;
  for (std::int64_t i = 5; i < 1002; ++i) expected += words[i];
  EXPECT_EQ(measure::SumWords(words.data(), 5, 1002), expected);  // a tail that is not a multiple of 4
  EXPECT_EQ(measure::SumWords(words.data(), 7, 7), 0u);

  std::vector<double> a(21, -1.0), b(21), c(21);
  for (int i = 0; i < 21; ++i) b[i] = i, c[i] = 0.5 * i;
  measure::Triad(a.data(), b.data(), c.data(), 3.0, 2, 19);
  for (int i = 0; i < 21; ++i) EXPECT_EQ(a[i], i >= 2 && i < 19 ? i + 1.5 * i : -1.0) << i;
}

// The bandwidth must come from memory, not from an L3 that holds the whole array.
TEST(Bandwidth, MainMemoryArraysOutgrowTheL3) {
  EXPECT_EQ(measure::MainMemoryBytes(0), std::int64_t{128} << 20);  // L3 unknown: the floor
  EXPECT_EQ(measure::MainMemoryBytes(std::int64_t{32} << 20), std::int64_t{128} << 20);  // Zen 3
  EXPECT_EQ(measure::MainMemoryBytes(std::int64_t{260} << 20), std::int64_t{520} << 20);  // a Xeon
  const std::int64_t l3 = DetectedCpuCaches().l3.bytes;
  EXPECT_EQ(measure::MainMemoryBytes(), measure::MainMemoryBytes(l3));
  EXPECT_GE(measure::MainMemoryBytes(), 2 * l3);
}

// The evictor reads every word of its buffer, on every call, whatever the thread count.
TEST(CacheEvictor, ReadsEveryWordOfItsBuffer) {
  for (int threads : {1, 2, 3}) {
    const measure::CacheEvictor evictor((std::int64_t{1} << 20) + 100, threads);
    EXPECT_EQ(evictor.bytes(), (std::int64_t{1} << 20) + 96);
    EXPECT_EQ(evictor.Evict(), evictor.bytes() / 8) << threads;
    EXPECT_EQ(evictor.Evict(), evictor.bytes() / 8) << threads;
  }
}

TEST(Bandwidth, MeasuresPositiveRatesOnSmallArrays) {
  const measure::Bandwidth bw = measure::MeasureBandwidth(2, 1 << 20, 2);
  EXPECT_EQ(bw.threads, 2);
  EXPECT_EQ(bw.array_bytes, 1 << 20);
  EXPECT_GT(bw.read_gbs, 0);
  EXPECT_GT(bw.triad_gbs, 0);
  EXPECT_TRUE(std::isfinite(bw.read_gbs) && std::isfinite(bw.triad_gbs));
}

TEST(SafeSoftmaxRow, MatchesFloat64OverThePrefixAndZeroesTheRest) {
  for (std::int64_t n = 1; n <= 37; ++n) {
    for (std::int64_t visible : {std::int64_t{0}, std::int64_t{1}, n / 2, n}) {
      std::vector<float> row(static_cast<std::size_t>(n));
      for (std::int64_t j = 0; j < n; ++j) row[j] = 30.0f * std::sin(1.7f * static_cast<float>(j + n));
      const std::vector<float> S = row;
      const float lse = SafeSoftmaxRow(row.data(), visible, n);
      if (visible == 0) {
        EXPECT_EQ(lse, -std::numeric_limits<float>::infinity());
      } else {
        double m = -std::numeric_limits<double>::infinity(), l = 0;
        for (std::int64_t j = 0; j < visible; ++j) m = std::max<double>(m, S[j]);
        for (std::int64_t j = 0; j < visible; ++j) l += std::exp(S[j] - m);
        EXPECT_NEAR(lse, m + std::log(l), 1e-5 * std::max(1.0, std::abs(m)));
        for (std::int64_t j = 0; j < visible; ++j)
          EXPECT_NEAR(row[j], std::exp(S[j] - m) / l, 2e-6) << "n=" << n << " j=" << j;
      }
      for (std::int64_t j = visible; j < n; ++j) EXPECT_EQ(row[j], 0.0f) << "n=" << n << " j=" << j;
    }
  }
}

}  // namespace
}  // namespace flashattn::bench
