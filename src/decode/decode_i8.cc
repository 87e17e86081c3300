// The decode kernel for int8 caches, compiled for every Highway target (src/simd/dispatch.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "decode/decode_i8.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "decode/decode-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE {
void DecodeI8(const DecodeParams& params) { decode_kernel::DecodeT<std::int8_t>(params); }
}  // namespace flashattn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashattn {
HWY_EXPORT(DecodeI8);
void decode_kernel::DecodeI8(const DecodeParams& params) { HWY_DYNAMIC_DISPATCH(DecodeI8)(params); }
}  // namespace flashattn
#endif
