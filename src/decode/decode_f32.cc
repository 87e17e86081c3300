// The decode kernel for f32 tensors, compiled for every Highway target (src/simd/dispatch.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "decode/decode_f32.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "decode/decode-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE {
void DecodeF32(const DecodeParams& params, const decode_kernel::KernelSequences& sequences) {
  decode_kernel::DecodeT<float>(params, sequences);
}
}  // namespace flashattn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashattn {
HWY_EXPORT(DecodeF32);
void decode_kernel::DecodeF32(const DecodeParams& params, const KernelSequences& sequences) {
  HWY_DYNAMIC_DISPATCH(DecodeF32)(params, sequences);
}
}  // namespace flashattn
#endif
