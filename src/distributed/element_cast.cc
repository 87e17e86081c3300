#include "distributed/element_cast.h"

#include <bit>
#include <cstdint>
#include <cstring>

#include "common/element.h"
#include "flashattn/flashattn.h"

namespace flashattn::distributed {

void WidenRows(const StridedTensor& from, DType dtype, std::int64_t row_begin, std::int64_t rows, float* to) {
  for (std::int64_t b = 0; b < from.batch; ++b)
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t h = 0; h < from.heads; ++h) {
        const std::int64_t at = b * from.strides.batch + (row_begin + i) * from.strides.seq + h * from.strides.head;
        float* row = to + ((b * rows + i) * from.heads + h) * from.dim;
        if (dtype == DType::kF32) {
          std::memcpy(row, static_cast<const float*>(from.data) + at, sizeof(float) * from.dim);
        } else {
          for (std::int64_t x = 0; x < from.dim; ++x) row[x] = LoadAsFloat(from.data, dtype, at + x);
        }
      }
}

void WidenContiguous(const void* from, DType dtype, std::int64_t count, float* to) {
  if (dtype == DType::kF32) {
    std::memcpy(to, from, sizeof(float) * count);
    return;
  }
  for (std::int64_t n = 0; n < count; ++n) to[n] = LoadAsFloat(from, dtype, n);
}

void NarrowInto(const float* from, DType dtype, const Strides& strides, std::int64_t batch, std::int64_t seqlen,
                std::int64_t heads, std::int64_t dim, void* to) {
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t i = 0; i < seqlen; ++i)
      for (std::int64_t h = 0; h < heads; ++h) {
        const float* row = from + ((b * seqlen + i) * heads + h) * dim;
        const std::int64_t at = b * strides.batch + i * strides.seq + h * strides.head;
        for (std::int64_t x = 0; x < dim; ++x) StoreFromFloat(to, dtype, at + x, row[x]);
      }
}

}  // namespace flashattn::distributed
