// The fused forward kernel for f16 tensors, compiled for every Highway target (src/simd/dispatch.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "forward/forward_f16.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "forward/forward-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE {
void ForwardF16(const AttentionParams& params) { forward_kernel::ForwardT<hwy::float16_t>(params); }
}  // namespace flashattn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashattn {
HWY_EXPORT(ForwardF16);
void forward_kernel::ForwardF16(const AttentionParams& params) { HWY_DYNAMIC_DISPATCH(ForwardF16)(params); }
}  // namespace flashattn
#endif
