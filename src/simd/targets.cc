// The test hooks of targets.h: the targets compiled into the library, restricting the dispatch to one of
// them, and the vector exp on the dispatched target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "simd/targets.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "simd/exp-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// y = Exp(x), or ExpOfNonPositive(x) (the softmax's variant) when `non_positive`.
void ExpArray(const float* x, float* y, std::size_t n, bool non_positive) {
  const auto exp = [non_positive](auto d, auto v) { return non_positive ? ExpOfNonPositive(d, v) : Exp(d, v); };
  const hn::ScalableTag<float> df;
  const std::size_t L = hn::Lanes(df);
  std::size_t i = 0;
  for (; i + L <= n; i += L) hn::StoreU(exp(df, hn::LoadU(df, x + i)), df, y + i);
  for (; i < n; ++i) {  // the tail through the same vector code, one lane at a time
    const hn::CappedTag<float, 1> d1;
    hn::StoreU(exp(d1, hn::LoadU(d1, x + i)), d1, y + i);
  }
}

std::int64_t TargetOfThisCode() { return HWY_TARGET; }

}  // namespace flashattn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "simd/targets.h"

namespace flashattn {
HWY_EXPORT(ExpArray);
HWY_EXPORT(TargetOfThisCode);
}  // namespace flashattn

namespace flashattn::simd {

void VectorExp(const float* x, float* y, std::size_t n) { HWY_DYNAMIC_DISPATCH(ExpArray)(x, y, n, false); }

void VectorExpOfNonPositive(const float* x, float* y, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(ExpArray)(x, y, n, true);
}

std::int64_t DispatchedTarget() { return HWY_DYNAMIC_DISPATCH(TargetOfThisCode)(); }

std::vector<std::int64_t> CompiledTargets() { return hwy::SupportedAndGeneratedTargets(); }

std::string TargetName(std::int64_t target) { return hwy::TargetName(target); }

void RestrictTargetForTest(std::int64_t target) { hwy::SetSupportedTargetsForTest(target); }

}  // namespace flashattn::simd
#endif
