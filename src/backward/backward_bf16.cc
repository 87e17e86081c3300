// The fused backward kernel for bf16 tensors, compiled for every Highway target (src/simd/dispatch.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backward/backward_bf16.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "backward/backward-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE {
void BackwardBF16(const BackwardParams& params) { backward_kernel::BackwardT<hwy::bfloat16_t>(params); }
}  // namespace flashattn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashattn {
HWY_EXPORT(BackwardBF16);
void backward_kernel::BackwardBF16(const BackwardParams& params) { HWY_DYNAMIC_DISPATCH(BackwardBF16)(params); }
}  // namespace flashattn
#endif
