// The fused forward kernel for bf16 tensors, compiled for every Highway target (one element type per
// translation unit keeps the compiles parallel and small).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/fused_forward_bf16.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/fused_dispatch.h"
#include "kernels/fused_forward-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::kernels::HWY_NAMESPACE {
void ForwardBF16(const AttentionParams& params) { FusedForwardT<hwy::bfloat16_t>(params); }
}  // namespace flashattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashattn::kernels {
HWY_EXPORT(ForwardBF16);
void FusedForwardBF16(const AttentionParams& params) { HWY_DYNAMIC_DISPATCH(ForwardBF16)(params); }
}  // namespace flashattn::kernels
#endif
