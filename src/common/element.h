// Scalar conversions between float32 and the float types of the API (IEEE binary16 and bfloat16), rounding to
// nearest even: on raw bit patterns and DType-tagged arrays (the reference layer, the steps around the
// kernels), and on the kernels' element types (their scalar tails; simd/convert-inl.h widens whole vectors).
// The quantized caches' elements are common/cache_element_traits.h's.
#ifndef FLASHATTN_COMMON_ELEMENT_H_
#define FLASHATTN_COMMON_ELEMENT_H_

#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "flashattn/flashattn.h"
#include "hwy/base.h"

namespace flashattn {

inline float F32FromBF16(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

inline std::uint16_t BF16FromF32(float x) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<std::uint16_t>(u >> 16);
}

inline float F32FromF16(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
  // Subnormal or zero: value = mantissa · 2⁻²⁴, exact in float32.
  const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
  return sign ? -magnitude : magnitude;
}

inline std::uint16_t F16FromF32(float x) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;                  // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;                 // rounds to ≥ 65520: infinity
  if (abs < 0x38800000u) {                                       // below 2⁻¹⁴: subnormal half
    // x = m · 2⁻²⁴ with m rounded to nearest even; the float multiply rounds exactly that way.
    const float scaled = std::bit_cast<float>(abs) * 0x1p24f;
    const float rounded = scaled + 0x1p23f - 0x1p23f;  // round to integer, ties to even
    return sign | static_cast<std::uint16_t>(rounded);
  }
  // Normal: rebias the exponent and round the 13 dropped mantissa bits to nearest even.
  std::uint32_t bits = abs - (112u << 23);
  bits += 0xfffu + ((bits >> 13) & 1u);
  return sign | static_cast<std::uint16_t>(bits >> 13);
}

// One element of the kernels' types as float32, and back. Through the 16 bits, with bit_cast: Highway's
// float16_t is a struct of them on x86 but the native __fp16 on Arm.
HWY_INLINE float ToF32(float x) { return x; }
HWY_INLINE float ToF32(hwy::float16_t x) { return F32FromF16(std::bit_cast<std::uint16_t>(x)); }
HWY_INLINE float ToF32(hwy::bfloat16_t x) { return F32FromBF16(std::bit_cast<std::uint16_t>(x)); }
template <typename T>
HWY_INLINE T FromF32(float x) {
  if constexpr (std::is_same_v<T, float>) return x;
  else if constexpr (std::is_same_v<T, hwy::float16_t>) return std::bit_cast<T>(F16FromF32(x));
  else return std::bit_cast<T>(BF16FromF32(x));
}

// Row `row` of head h of sequence b of a tensor of T with strides s (in elements): const for a const base.
template <typename T, typename Void>
auto RowOf(Void* base, const Strides& s, std::int64_t b, std::int64_t h, std::int64_t row) {
  using Element = std::conditional_t<std::is_const_v<Void>, const T, T>;
  return static_cast<Element*>(base) + b * s.batch + h * s.head + row * s.seq;
}

// Element `index` of an array of `dtype`, as float.
inline float LoadAsFloat(const void* base, DType dtype, std::int64_t index) {
  switch (dtype) {
    case DType::kF32: return static_cast<const float*>(base)[index];
    case DType::kF16: return F32FromF16(static_cast<const std::uint16_t*>(base)[index]);
    case DType::kBF16: return F32FromBF16(static_cast<const std::uint16_t*>(base)[index]);
  }
  return 0.0f;
}

inline void StoreFromFloat(void* base, DType dtype, std::int64_t index, float value) {
  switch (dtype) {
    case DType::kF32: static_cast<float*>(base)[index] = value; return;
    case DType::kF16: static_cast<std::uint16_t*>(base)[index] = F16FromF32(value); return;
    case DType::kBF16: static_cast<std::uint16_t*>(base)[index] = BF16FromF32(value); return;
  }
}

// x rounded to the nearest value representable in `dtype`.
inline float RoundTo(DType dtype, float x) {
  switch (dtype) {
    case DType::kF32: return x;
    case DType::kF16: return F32FromF16(F16FromF32(x));
    case DType::kBF16: return F32FromBF16(BF16FromF32(x));
  }
  return x;
}

}  // namespace flashattn

#endif  // FLASHATTN_COMMON_ELEMENT_H_
