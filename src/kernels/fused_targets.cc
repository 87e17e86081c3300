// FusedForward's choice by element type, and the test hooks of fused_forward.h: the targets compiled into
// the library, restricting the dispatch to one of them, and the vector exp on the dispatched target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/fused_targets.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/vec_exp-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::kernels::HWY_NAMESPACE {
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

std::int64_t DispatchedTarget() { return HWY_TARGET; }

}  // namespace flashattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <string>
#include <vector>

#include "kernels/fused_dispatch.h"
#include "kernels/fused_forward.h"

namespace flashattn::kernels {

void FusedForward(const AttentionParams& params) {
  switch (params.dtype) {
    case DType::kF32: return FusedForwardF32(params);
    case DType::kF16: return FusedForwardF16(params);
    case DType::kBF16: return FusedForwardBF16(params);
  }
}

HWY_EXPORT(ExpArray);
HWY_EXPORT(DispatchedTarget);

void FusedExp(const float* x, float* y, std::size_t n) { HWY_DYNAMIC_DISPATCH(ExpArray)(x, y, n, false); }

void FusedExpOfNonPositive(const float* x, float* y, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(ExpArray)(x, y, n, true);
}

std::int64_t FusedDispatchedTarget() { return HWY_DYNAMIC_DISPATCH(DispatchedTarget)(); }

std::vector<std::int64_t> FusedTargets() { return hwy::SupportedAndGeneratedTargets(); }

std::string FusedTargetName(std::int64_t target) { return hwy::TargetName(target); }

void RestrictFusedTargetForTest(std::int64_t target) { hwy::SetSupportedTargetsForTest(target); }

}  // namespace flashattn::kernels
#endif
