// Widening of float16/bfloat16 tensors to float32 (exact) and rounding back to nearest even: the ring
// computes every block in float32 and rounds the result once, at the end.
#ifndef FLASHATTN_DISTRIBUTED_ELEMENT_CAST_H_
#define FLASHATTN_DISTRIBUTED_ELEMENT_CAST_H_

#include <cstdint>

#include "flashattn/flashattn.h"

namespace flashattn::distributed {

// A rank-4 tensor (batch, seq, head, dim) in the caller's memory, addressed through its strides.
struct StridedTensor {
  const void* data = nullptr;
  Strides strides;
  std::int64_t batch = 0, seqlen = 0, heads = 0, dim = 0;
};

// Copies rows [row_begin, row_begin + rows) of `from` (element type `dtype`) into the contiguous float32
// tensor `to` of shape (batch, rows, heads, dim).
void WidenRows(const StridedTensor& from, DType dtype, std::int64_t row_begin, std::int64_t rows, float* to);

// Widens `count` contiguous elements of `dtype`.
void WidenContiguous(const void* from, DType dtype, std::int64_t count, float* to);

// Writes the contiguous float32 tensor `from` (batch, seqlen, heads, dim) into `to`, of `dtype` with the
// given strides, rounding to nearest even.
void NarrowInto(const float* from, DType dtype, const Strides& strides, std::int64_t batch, std::int64_t seqlen,
                std::int64_t heads, std::int64_t dim, void* to);

}  // namespace flashattn::distributed

#endif  // FLASHATTN_DISTRIBUTED_ELEMENT_CAST_H_
