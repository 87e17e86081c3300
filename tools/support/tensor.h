// A contiguous (batch, seq, heads, dim) tensor of any element type that owns its bytes: the operands of the
// programs that drive the library through its public API (the ring runner, the MPI tests).
#ifndef FLASHATTN_TOOLS_SUPPORT_TENSOR_H_
#define FLASHATTN_TOOLS_SUPPORT_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "flashattn/flashattn.h"

namespace flashattn::support {

struct Tensor {
  std::int64_t batch = 0, seq = 0, heads = 0, dim = 0;
  DType dtype = DType::kF32;
  std::vector<std::byte> bytes;

  Tensor() = default;
  Tensor(std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t dim, DType dtype);
  void* data() { return bytes.data(); }
  const void* data() const { return bytes.data(); }
  Strides strides() const { return {seq * heads * dim, heads * dim, dim}; }
  std::int64_t Elements() const { return batch * seq * heads * dim; }
  // Every element as float32, in order; and the assignment of as many float32 values, rounded to dtype.
  std::vector<float> Floats() const;
  void Assign(const std::vector<float>& values);
  float At(std::int64_t b, std::int64_t i, std::int64_t h, std::int64_t c) const;
};

}  // namespace flashattn::support

#endif  // FLASHATTN_TOOLS_SUPPORT_TENSOR_H_
