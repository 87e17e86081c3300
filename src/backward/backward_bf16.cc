// The fused backward kernel for bf16 tensors, compiled for every Highway target (src/simd/dispatch.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backward/backward_bf16.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "backward/backward-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::backward_kernel::HWY_NAMESPACE {
void BackwardBF16(const BackwardParams& params) { BackwardT<hwy::bfloat16_t>(params); }
}  // namespace flashattn::backward_kernel::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashattn::backward_kernel {
HWY_EXPORT(BackwardBF16);
void BackwardBF16(const BackwardParams& params) { HWY_DYNAMIC_DISPATCH(BackwardBF16)(params); }
}  // namespace flashattn::backward_kernel
#endif
