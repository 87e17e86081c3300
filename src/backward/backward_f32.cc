// The fused backward kernel for f32 tensors, compiled for every Highway target (src/simd/dispatch.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backward/backward_f32.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "backward/backward-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE {
void BackwardF32(const BackwardParams& params) { backward_kernel::BackwardT<float>(params); }
}  // namespace flashattn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashattn {
HWY_EXPORT(BackwardF32);
void backward_kernel::BackwardF32(const BackwardParams& params) { HWY_DYNAMIC_DISPATCH(BackwardF32)(params); }
}  // namespace flashattn
#endif
