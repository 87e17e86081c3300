// The decode kernel for f16 tensors, compiled for every Highway target (src/simd/dispatch.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "decode/decode_f16.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "decode/decode-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::decode_kernel::HWY_NAMESPACE {
void DecodeF16(const DecodeParams& params) { DecodeT<hwy::float16_t>(params); }
}  // namespace flashattn::decode_kernel::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashattn::decode_kernel {
HWY_EXPORT(DecodeF16);
void DecodeF16(const DecodeParams& params) { HWY_DYNAMIC_DISPATCH(DecodeF16)(params); }
}  // namespace flashattn::decode_kernel
#endif
