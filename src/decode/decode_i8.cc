// The decode kernel for int8 caches, compiled for every Highway target (src/simd/dispatch.h) and also for
// AVX3_DL, whose AVX-512 VNNI forms the integer scores (decode/integer_scores-inl.h). Highway 1.0.3 compiles
// AVX3_DL only on request; this translation unit alone asks, so the other kernels keep their targets, and a
// dispatch restricted to AVX3_DL runs this kernel's AVX3_DL code (Int8KernelTargets lists it for the tests).
#define HWY_WANT_AVX3_DL
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "decode/decode_i8.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "decode/decode-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE {
void DecodeI8(const DecodeParams& params, const decode_kernel::KernelSequences& sequences) {
  decode_kernel::DecodeT<std::int8_t>(params, sequences);
}
}  // namespace flashattn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashattn {
HWY_EXPORT(DecodeI8);
void decode_kernel::DecodeI8(const DecodeParams& params, const KernelSequences& sequences) {
  HWY_DYNAMIC_DISPATCH(DecodeI8)(params, sequences);
}
std::vector<std::int64_t> decode_kernel::Int8KernelTargets() { return hwy::SupportedAndGeneratedTargets(); }
}  // namespace flashattn
#endif
