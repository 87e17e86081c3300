// The decode kernel for bf16 tensors, compiled for every Highway target (src/simd/dispatch.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "decode/decode_bf16.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "decode/decode-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::decode_kernel::HWY_NAMESPACE {
void DecodeBF16(const DecodeParams& params) { DecodeT<hwy::bfloat16_t>(params); }
}  // namespace flashattn::decode_kernel::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashattn::decode_kernel {
HWY_EXPORT(DecodeBF16);
void DecodeBF16(const DecodeParams& params) { HWY_DYNAMIC_DISPATCH(DecodeBF16)(params); }
}  // namespace flashattn::decode_kernel
#endif
