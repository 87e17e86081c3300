// The decode kernel for FP8 E4M3 caches, compiled for every Highway target (src/simd/dispatch.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "decode/decode_fp8_e4m3.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "decode/decode-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE {
void DecodeFp8E4M3(const DecodeParams& params, const decode_kernel::KernelSequences& sequences) {
  decode_kernel::DecodeT<Fp8E4M3>(params, sequences);
}
}  // namespace flashattn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashattn {
HWY_EXPORT(DecodeFp8E4M3);
void decode_kernel::DecodeFp8E4M3(const DecodeParams& params, const KernelSequences& sequences) {
  HWY_DYNAMIC_DISPATCH(DecodeFp8E4M3)(params, sequences);
}
}  // namespace flashattn
#endif
