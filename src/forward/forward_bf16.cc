// The fused forward kernel for bf16 tensors, compiled for every Highway target (src/simd/dispatch.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "forward/forward_bf16.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "forward/forward-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::forward_kernel::HWY_NAMESPACE {
void ForwardBF16(const AttentionParams& params) { ForwardT<hwy::bfloat16_t>(params); }
}  // namespace flashattn::forward_kernel::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashattn::forward_kernel {
HWY_EXPORT(ForwardBF16);
void ForwardBF16(const AttentionParams& params) { HWY_DYNAMIC_DISPATCH(ForwardBF16)(params); }
}  // namespace flashattn::forward_kernel
#endif
