// Zen 3 has two FMA pipes of latency 4, so at least 8 independent vector chains are needed to keep both busy;
// kFmaChains = 12 leaves margin and still fits the 16 AVX2 registers with the two constants.
#include "measure/measure.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "measure/fma_peak.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::measure {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Returns Σ_c Σ_lanes x_c after `iterations` updates x_c ← x_c·a + b; *lanes = lanes per vector.
double FmaChains(std::int64_t iterations, float a, float b, std::int64_t* lanes, const char** target) {
  const hn::ScalableTag<float> df;
  const auto va = hn::Set(df, a);
  const auto vb = hn::Set(df, b);
  auto x0 = hn::Set(df, 1.0f), x1 = hn::Set(df, 2.0f), x2 = hn::Set(df, 3.0f), x3 = hn::Set(df, 4.0f);
  auto x4 = hn::Set(df, 5.0f), x5 = hn::Set(df, 6.0f), x6 = hn::Set(df, 7.0f), x7 = hn::Set(df, 8.0f);
  auto x8 = hn::Set(df, 9.0f), x9 = hn::Set(df, 10.0f), x10 = hn::Set(df, 11.0f), x11 = hn::Set(df, 12.0f);
  static_assert(kFmaChains == 12, "one variable per chain");
  for (std::int64_t n = 0; n < iterations; ++n) {
    x0 = hn::MulAdd(x0, va, vb);
    x1 = hn::MulAdd(x1, va, vb);
    x2 = hn::MulAdd(x2, va, vb);
    x3 = hn::MulAdd(x3, va, vb);
    x4 = hn::MulAdd(x4, va, vb);
    x5 = hn::MulAdd(x5, va, vb);
    x6 = hn::MulAdd(x6, va, vb);
    x7 = hn::MulAdd(x7, va, vb);
    x8 = hn::MulAdd(x8, va, vb);
    x9 = hn::MulAdd(x9, va, vb);
    x10 = hn::MulAdd(x10, va, vb);
    x11 = hn::MulAdd(x11, va, vb);
  }
  // hn::Add, not operator+: Arm SVE's vectors are built-in sizeless types without operators.
  const auto sum = hn::Add(hn::Add(hn::Add(hn::Add(x0, x1), hn::Add(x2, x3)),
                                   hn::Add(hn::Add(x4, x5), hn::Add(x6, x7))),
                           hn::Add(hn::Add(x8, x9), hn::Add(x10, x11)));
  double total = 0;
  HWY_ALIGN float out[hn::MaxLanes(df)];
  hn::Store(sum, df, out);
  for (std::size_t i = 0; i < hn::Lanes(df); ++i) total += out[i];
  *lanes = static_cast<std::int64_t>(hn::Lanes(df));
  *target = hwy::TargetName(HWY_TARGET);
  return total;
}

}  // namespace HWY_NAMESPACE
}  // namespace flashattn::measure
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "measure/peak_trials.h"

namespace flashattn::measure {

HWY_EXPORT(FmaChains);

namespace {

double DispatchFmaChains(std::int64_t iterations, float a, float b, double* flops, const char** target) {
  std::int64_t lanes = 0;
  const double sum = HWY_DYNAMIC_DISPATCH(FmaChains)(iterations, a, b, &lanes, target);
  *flops = 2.0 * static_cast<double>(lanes) * kFmaChains * static_cast<double>(iterations);
  return sum;
}

}  // namespace

double RunFmaChains(std::int64_t iterations, float a, float b, double* flops) {
  const char* target = nullptr;
  return DispatchFmaChains(iterations, a, b, flops, &target);
}

FmaPeak MeasureFmaPeak(int threads, double seconds) {
  // x ← x·a + b with a < 1 converges to b / (1 − a) = 1: no overflow, no subnormals, however long it runs.
  constexpr float a = 0.9999f, b = 0.0001f;
  FmaPeak peak;
  peak.threads = threads;
  const char* target = "unknown";
  double flops = 0;
  DispatchFmaChains(1, a, b, &flops, &target);  // learn the target's name
  peak.target = target;
  const PeakRates rates = BestTrialRates(
      threads, seconds, [](std::int64_t iterations, double* ops) { return RunFmaChains(iterations, a, b, ops); });
  peak.gflops = rates.wall_gops;
  peak.cpu_gflops = rates.cpu_gops;
  return peak;
}

}  // namespace flashattn::measure
#endif  // HWY_ONCE
