#include "support/tensor.h"

#include <cstdint>
#include <vector>

#include "flashattn/flashattn.h"
#include "support/elements.h"

namespace flashattn::support {

Tensor::Tensor(std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t dim, DType dtype)
    : batch(batch),
      seq(seq),
      heads(heads),
      dim(dim),
      dtype(dtype),
      bytes(static_cast<std::size_t>(batch * seq * heads * dim) * size_of(dtype)) {}

std::vector<float> Tensor::Floats() const {
  std::vector<float> values(static_cast<std::size_t>(Elements()));
  ConvertToF32(data(), dtype, Elements(), values.data());
  return values;
}

void Tensor::Assign(const std::vector<float>& values) {
  ConvertFromF32(values.data(), Elements(), dtype, data());
}

float Tensor::At(std::int64_t b, std::int64_t i, std::int64_t h, std::int64_t c) const {
  return LoadAsFloat(data(), dtype, ((b * seq + i) * heads + h) * dim + c);
}

}  // namespace flashattn::support
