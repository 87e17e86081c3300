// Row conversions between the API's element types and float32, vectorized (F16C on x86 where present), for
// the baseline: a user holding float16 or bfloat16 tensors converts them before calling sgemm.
#ifndef FLASHATTN_BENCH_CONVERT_H_
#define FLASHATTN_BENCH_CONVERT_H_

#include <cstdint>

#include "flashattn/flashattn.h"

namespace flashattn::bench {

// dst[i] = src[i] as float, i < n. Exact for every type.
void ConvertToF32(const void* src, DType dtype, std::int64_t n, float* dst);
// dst[i] = src[i] rounded to `dtype` (to nearest even), i < n.
void ConvertFromF32(const float* src, std::int64_t n, DType dtype, void* dst);

}  // namespace flashattn::bench

#endif  // FLASHATTN_BENCH_CONVERT_H_
