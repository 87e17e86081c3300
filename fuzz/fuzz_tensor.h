// Tensors for the fuzz targets, allocated to exactly the bytes their strides address (so AddressSanitizer
// sees a read or write one element past the end), in layouts drawn from the fuzz input: any order of the
// batch, sequence and head dimensions, padding between rows and heads, and broadcast (stride 0) inputs.
#ifndef FLASHATTN_FUZZ_FUZZ_TENSOR_H_
#define FLASHATTN_FUZZ_FUZZ_TENSOR_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/element.h"
#include "flashattn/flashattn.h"
#include "fuzz_input.h"

namespace flashattn::fuzz {

// The byte every output starts as; a byte of an output that the call should not write must keep it.
inline constexpr unsigned char kPattern = 0xa5;

// A rank-4 tensor (outer, seq, head, dim) whose dim stride is 1. `outer` is the batch, or the page of a
// paged cache.
struct Tensor {
  std::array<std::int64_t, 4> sizes{};  // outer, seq, head, dim
  Strides strides;
  DType dtype = DType::kF32;
  std::vector<unsigned char> bytes;

  std::int64_t Offset(std::int64_t n, std::int64_t s, std::int64_t h, std::int64_t c) const {
    return n * strides.batch + s * strides.seq + h * strides.head + c;
  }
  bool Empty() const { return std::find(sizes.begin(), sizes.end(), 0) != sizes.end(); }
  void* data() { return bytes.empty() ? nullptr : bytes.data(); }
  float Get(std::int64_t n, std::int64_t s, std::int64_t h, std::int64_t c) const {
    return LoadAsFloat(bytes.data(), dtype, Offset(n, s, h, c));
  }
  void Set(std::int64_t n, std::int64_t s, std::int64_t h, std::int64_t c, float value) {
    StoreFromFloat(bytes.data(), dtype, Offset(n, s, h, c), value);
  }
  template <typename F>
  void ForEach(F&& f) const {
    for (std::int64_t n = 0; n < sizes[0]; ++n)
      for (std::int64_t s = 0; s < sizes[1]; ++s)
        for (std::int64_t h = 0; h < sizes[2]; ++h)
          for (std::int64_t c = 0; c < sizes[3]; ++c) f(n, s, h, c);
  }
};

// Strides for `sizes` in an order and padding drawn from `in`; inputs may also broadcast their outer or
// head dimension (stride 0), which outputs may not.
inline Tensor DrawTensor(FuzzInput& in, std::array<std::int64_t, 4> sizes, DType dtype, bool input) {
  Tensor t;
  t.sizes = sizes;
  t.dtype = dtype;
  static constexpr std::array<std::array<int, 3>, 6> kOrders = {
      {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}}};  // outer→inner of (outer, seq, head)
  // Any order of the three, padded by 0–3 elements per level; or flash-attn's (b, s, h, d) or PyTorch's
  // (b, h, s, d), unpadded.
  const int choice = static_cast<int>(in.Range(0, 7));
  const std::array<int, 3> order = choice < 6 ? kOrders[choice] : kOrders[choice == 6 ? 0 : 1];
  const bool padded = choice < 6;
  std::array<std::int64_t, 3> stride{};
  std::int64_t span = sizes[3];
  for (int level = 2; level >= 0; --level) {
    const int dim = order[level];
    stride[dim] = span + (padded ? in.Range(0, 3) : 0);
    span = stride[dim] * std::max<std::int64_t>(1, sizes[dim]);
  }
  if (input && in.OneIn(6)) stride[in.Bool() ? 0 : 2] = 0;
  t.strides = {stride[0], stride[1], stride[2]};
  if (!t.Empty()) {
    std::int64_t last = sizes[3] - 1;
    for (int dim = 0; dim < 3; ++dim) last += (sizes[dim] - 1) * stride[dim];
    t.bytes.assign((last + 1) * size_of(dtype), kPattern);
  }
  return t;
}

// Fills every addressed element with rng values times `scale`, rounded to the element type.
inline void FillRandom(Tensor& t, Rng& rng, float scale) {
  t.ForEach([&](std::int64_t n, std::int64_t s, std::int64_t h, std::int64_t c) {
    t.Set(n, s, h, c, scale * rng.Symmetric());
  });
}

// Which bytes of `t` its elements occupy.
inline std::vector<bool> AddressedBytes(const Tensor& t) {
  std::vector<bool> addressed(t.bytes.size(), false);
  const std::int64_t elem = static_cast<std::int64_t>(size_of(t.dtype));
  t.ForEach([&](std::int64_t n, std::int64_t s, std::int64_t h, std::int64_t c) {
    const std::int64_t offset = t.Offset(n, s, h, c) * elem;
    std::fill_n(addressed.begin() + offset, elem, true);
  });
  return addressed;
}

}  // namespace flashattn::fuzz

#endif  // FLASHATTN_FUZZ_FUZZ_TENSOR_H_
