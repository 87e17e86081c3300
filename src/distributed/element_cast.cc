#include "distributed/element_cast.h"

#include <bit>
#include <cstdint>
#include <cstring>

#include "flashattn/flashattn.h"

namespace flashattn::distributed {
namespace {

float FromBFloat16(std::uint16_t bits) { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }

float FromFloat16(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  const std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  if (exponent != 0) return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
  const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;  // subnormal: mantissa · 2⁻²⁴, exact
  return sign ? -magnitude : magnitude;
}

std::uint16_t ToBFloat16(float x) {
  std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40);  // NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);  // nearest, ties to even
  return static_cast<std::uint16_t>(bits >> 16);
}

std::uint16_t ToFloat16(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (magnitude >= 0x477ff000u) return sign | 0x7c00u;  // rounds to 65520 or more: infinity
  if (magnitude < 0x38800000u) {                        // below 2⁻¹⁴: a subnormal m · 2⁻²⁴
    const float scaled = std::bit_cast<float>(magnitude) * 0x1p24f;
    const float rounded = scaled + 0x1p23f - 0x1p23f;  // to an integer, ties to even
    return sign | static_cast<std::uint16_t>(rounded);
  }
  std::uint32_t rebiased = magnitude - (112u << 23);
  rebiased += 0xfffu + ((rebiased >> 13) & 1u);  // the 13 dropped mantissa bits, nearest even
  return sign | static_cast<std::uint16_t>(rebiased >> 13);
}

float Load(const void* base, DType dtype, std::int64_t index) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<const float*>(base)[index];
    case DType::kF16:
      return FromFloat16(static_cast<const std::uint16_t*>(base)[index]);
    case DType::kBF16:
      return FromBFloat16(static_cast<const std::uint16_t*>(base)[index]);
  }
  return 0.0f;
}

void Store(void* base, DType dtype, std::int64_t index, float value) {
  switch (dtype) {
    case DType::kF32:
      static_cast<float*>(base)[index] = value;
      return;
    case DType::kF16:
      static_cast<std::uint16_t*>(base)[index] = ToFloat16(value);
      return;
    case DType::kBF16:
      static_cast<std::uint16_t*>(base)[index] = ToBFloat16(value);
      return;
  }
}

}  // namespace

void WidenRows(const StridedTensor& from, DType dtype, std::int64_t row_begin, std::int64_t rows, float* to) {
  for (std::int64_t b = 0; b < from.batch; ++b)
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t h = 0; h < from.heads; ++h) {
        const std::int64_t at = b * from.strides.batch + (row_begin + i) * from.strides.seq + h * from.strides.head;
        float* row = to + ((b * rows + i) * from.heads + h) * from.dim;
        if (dtype == DType::kF32) {
          std::memcpy(row, static_cast<const float*>(from.data) + at, sizeof(float) * from.dim);
        } else {
          for (std::int64_t x = 0; x < from.dim; ++x) row[x] = Load(from.data, dtype, at + x);
        }
      }
}

void WidenContiguous(const void* from, DType dtype, std::int64_t count, float* to) {
  if (dtype == DType::kF32) {
    std::memcpy(to, from, sizeof(float) * count);
    return;
  }
  for (std::int64_t n = 0; n < count; ++n) to[n] = Load(from, dtype, n);
}

void NarrowInto(const float* from, DType dtype, const Strides& strides, std::int64_t batch, std::int64_t seqlen,
                std::int64_t heads, std::int64_t dim, void* to) {
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t i = 0; i < seqlen; ++i)
      for (std::int64_t h = 0; h < heads; ++h) {
        const float* row = from + ((b * seqlen + i) * heads + h) * dim;
        const std::int64_t at = b * strides.batch + i * strides.seq + h * strides.head;
        for (std::int64_t x = 0; x < dim; ++x) Store(to, dtype, at + x, row[x]);
      }
}

}  // namespace flashattn::distributed
