// The decode kernel: Flash-Decoding's split-KV loop (split_kv.h) around the streaming kernel of attend.h,
// for already-validated params. This header holds no SIMD types: the kernel is compiled for every Highway
// target and one of them is chosen at run time, once per call (src/simd/dispatch.h).
#ifndef FLASHATTN_DECODE_DECODE_H_
#define FLASHATTN_DECODE_DECODE_H_

#include "flashattn/decode.h"
#include "simd/dispatch.h"

namespace flashattn::decode_kernel {

// The kernel for one element type on the best target of this CPU (decode_f32.cc, ...).
void DecodeF32(const DecodeParams& params);
void DecodeF16(const DecodeParams& params);
void DecodeBF16(const DecodeParams& params);

// Appends the new keys, attends, and writes O (and LSE): one dispatch, by element type and SIMD target.
inline void Decode(const DecodeParams& params) {
  simd::CallForElementType<DecodeF32, DecodeF16, DecodeBF16>(params.dtype, params);
}

}  // namespace flashattn::decode_kernel

#endif  // FLASHATTN_DECODE_DECODE_H_
