// Conversions between the API's element types (float32, float16, bfloat16) and float32, for the programs:
// the library's own, so that a program converts exactly as the library does (rounding to nearest even,
// inf and NaN kept on every SIMD target).
#ifndef FLASHATTN_TOOLS_SUPPORT_ELEMENTS_H_
#define FLASHATTN_TOOLS_SUPPORT_ELEMENTS_H_

#include <cstdint>

#include "flashattn/flashattn.h"

namespace flashattn::support {

// Element `index` of an array of `dtype`, as float; and the store of a float into one, rounded to `dtype`.
float LoadAsFloat(const void* base, DType dtype, std::int64_t index);
void StoreFromFloat(void* base, DType dtype, std::int64_t index, float value);

// Rows, a vector at a time on the best SIMD target (F16C on x86 where present), the tail element by element:
// dst[i] = float(src[i]) for i < n, exact for every type;
void ConvertToF32(const void* src, DType dtype, std::int64_t n, float* dst);
// dst[i] = src[i] rounded to `dtype` (to nearest even), i < n.
void ConvertFromF32(const float* src, std::int64_t n, DType dtype, void* dst);

}  // namespace flashattn::support

#endif  // FLASHATTN_TOOLS_SUPPORT_ELEMENTS_H_
