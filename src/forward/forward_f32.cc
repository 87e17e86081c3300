// The fused forward kernel for f32 tensors, compiled for every Highway target (src/simd/dispatch.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "forward/forward_f32.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "forward/forward-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE {
void ForwardF32(const AttentionParams& params) { forward_kernel::ForwardT<float>(params); }
}  // namespace flashattn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashattn {
HWY_EXPORT(ForwardF32);
void forward_kernel::ForwardF32(const AttentionParams& params) { HWY_DYNAMIC_DISPATCH(ForwardF32)(params); }
}  // namespace flashattn
#endif
