// The fused forward kernel for f16 tensors, compiled for every Highway target (one element type per
// translation unit keeps the compiles parallel and small).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/fused_forward_f16.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/fused_dispatch.h"
#include "kernels/fused_forward-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::kernels::HWY_NAMESPACE {
void ForwardF16(const AttentionParams& params) { FusedForwardT<hwy::float16_t>(params); }
}  // namespace flashattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashattn::kernels {
HWY_EXPORT(ForwardF16);
void FusedForwardF16(const AttentionParams& params) { HWY_DYNAMIC_DISPATCH(ForwardF16)(params); }
}  // namespace flashattn::kernels
#endif
