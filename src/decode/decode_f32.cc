// The decode kernel for f32 tensors, compiled for every Highway target (src/simd/dispatch.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "decode/decode_f32.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "decode/decode-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::decode_kernel::HWY_NAMESPACE {
void DecodeF32(const DecodeParams& params) { DecodeT<float>(params); }
}  // namespace flashattn::decode_kernel::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashattn::decode_kernel {
HWY_EXPORT(DecodeF32);
void DecodeF32(const DecodeParams& params) { HWY_DYNAMIC_DISPATCH(DecodeF32)(params); }
}  // namespace flashattn::decode_kernel
#endif
