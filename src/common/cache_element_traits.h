// What the library knows of each element type a decode cache stores (include/flashattn/decode.h,
// CacheElement; docs/quantized_cache.md), in one traits type per storage type: its name and bytes, the largest
// magnitude it encodes, its scalar decoding (code → float) and encoding (float → code, to nearest even,
// saturating), and what the kernels must know of it (integer dot products, non-finite codes, the factor their
// widening leaves out, the usual scale granularity). VisitCacheElement is the one switch from the run-time
// CacheElement to the traits; each type's vector side is simd/convert-inl.h's VectorCodec.
#ifndef FLASHATTN_COMMON_CACHE_ELEMENT_TRAITS_H_
#define FLASHATTN_COMMON_CACHE_ELEMENT_TRAITS_H_

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <string_view>

#include "common/checked.h"
#include "common/element.h"
#include "flashattn/flashattn.h"
#include "hwy/base.h"

namespace flashattn {

// The kernels' element types of the FP8 caches: the byte, distinct from std::uint8_t and from each other.
struct Fp8E4M3 {
  std::uint8_t bits;
};
struct Fp8E5M2 {
  std::uint8_t bits;
};

// One specialization per storage type; a type without one does not compile.
template <typename Storage>
struct CacheElementTraits;

// A float cache: elements of its cache_dtype (float, float16 or bfloat16) are its values; no scales.
struct FloatCacheTraits {
  static constexpr CacheElement kElement = CacheElement::kFloat;
  static constexpr std::string_view kName = "float";
  static constexpr bool kQuantized = false;
  static constexpr bool kIntegerDots = false;
  static constexpr bool kMayHoldNonFinite = true;
  static constexpr float kWideningFactor = 1.0f;
};
template <>
struct CacheElementTraits<float> : FloatCacheTraits {
  using Storage = float;
};
template <>
struct CacheElementTraits<hwy::float16_t> : FloatCacheTraits {
  using Storage = hwy::float16_t;
};
template <>
struct CacheElementTraits<hwy::bfloat16_t> : FloatCacheTraits {
  using Storage = hwy::bfloat16_t;
};

// int8, symmetric: q ∈ [−127, 127] (−128 is never written), value = scale·q.
template <>
struct CacheElementTraits<std::int8_t> {
  using Storage = std::int8_t;
  static constexpr CacheElement kElement = CacheElement::kInt8;
  static constexpr std::string_view kName = "int8";
  static constexpr bool kQuantized = true;
  static constexpr std::int64_t kBytes = 1;
  static constexpr float kMax = 127.0f;
  static constexpr bool kIntegerDots = true;  // decode's integer scores and P̃V (decode/integer_*-inl.h)
  static constexpr bool kMayHoldNonFinite = false;
  static constexpr float kWideningFactor = 1.0f;
  static constexpr ScaleGranularity kDefaultGranularity = ScaleGranularity::kPerToken;  // llama.cpp's q8_0

  static float Decode(std::uint8_t code) { return static_cast<std::int8_t>(code); }
  // x rounded to nearest even and saturated to [−127, 127].
  static std::uint8_t Encode(float x) {
    const float clamped = x > 127.0f ? 127.0f : x < -127.0f ? -127.0f : x;
    const float magnitude = clamped < 0.0f ? -clamped : clamped;
    const float rounded = magnitude + 0x1p23f - 0x1p23f;  // round to integer, ties to even
    return static_cast<std::uint8_t>(static_cast<std::int8_t>(clamped < 0.0f ? -rounded : rounded));
  }
  // A code as the kernels widen it (LoadF32, ToF32): Decode(code) / kWideningFactor.
  static float Widened(std::uint8_t code) { return Decode(code); }
  // At most |Decode(Encode(x)) − x| for |x| ≤ kMax: half a step.
  static double MaxRoundingError(double) { return 0.5; }
};

// The rounding of a float32 x to the code of an OCP FP8 format with E exponent bits of bias b = 2^(E−1) − 1
// and M mantissa bits, from its traits (kExponentBits, kMantissaBits, kMax, kMaxCode): the constants of each
// step, shared by the scalar Encode below and the vector codec (simd/convert-inl.h), so that a format's
// knowledge is its traits' few numbers. Below 2^(1−b) a code is subnormal, m = x·2^(b−1+M) rounded to nearest
// even; above, the float32 exponent is rebiased by 127 − b and its 23 − M dropped mantissa bits are rounded to
// nearest even; from kMax on (inf too) the code saturates to kMaxCode; NaN gives S.1…1.
template <typename Format>
struct Fp8Rounding {
  static constexpr int kBias = (1 << (Format::kExponentBits - 1)) - 1;
  static constexpr std::uint32_t kSmallestNormalBits = static_cast<std::uint32_t>(127 + 1 - kBias) << 23;
  static constexpr float kSubnormalScale = static_cast<float>(1u << (kBias - 1 + Format::kMantissaBits));
  static constexpr std::uint32_t kRebias = static_cast<std::uint32_t>(127 - kBias) << 23;
  static constexpr int kDroppedBits = 23 - Format::kMantissaBits;
  static constexpr std::uint32_t kBelowHalf = (1u << (kDroppedBits - 1)) - 1;  // ties go by the kept bit
  static constexpr std::uint32_t kMaxBits = std::bit_cast<std::uint32_t>(Format::kMax);
  static constexpr std::uint8_t kMaxCode = Format::kMaxCode;
  static constexpr std::uint8_t kNanCode = 0x7f;

  static std::uint8_t Encode(float x) {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
    const std::uint8_t sign = static_cast<std::uint8_t>((u >> 24) & 0x80u);
    const std::uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return sign | kNanCode;
    if (abs >= kMaxBits) return sign | kMaxCode;
    if (abs < kSmallestNormalBits) {
      const float rounded = std::bit_cast<float>(abs) * kSubnormalScale + 0x1p23f - 0x1p23f;
      return sign | static_cast<std::uint8_t>(rounded);
    }
    std::uint32_t bits = abs - kRebias;
    bits += kBelowHalf + ((bits >> kDroppedBits) & 1u);
    return sign | static_cast<std::uint8_t>(bits >> kDroppedBits);
  }
};

// OCP FP8 E4M3: sign, 4 exponent bits of bias 7, 3 mantissa bits. Exponent 0 holds subnormals m·2⁻⁹;
// S.1111.111 is NaN, and there are no infinities, so the largest value is 1.75·2⁸ = 448.
template <>
struct CacheElementTraits<Fp8E4M3> {
  using Storage = Fp8E4M3;
  static constexpr CacheElement kElement = CacheElement::kFp8E4M3;
  static constexpr std::string_view kName = "fp8_e4m3";
  static constexpr bool kQuantized = true;
  static constexpr std::int64_t kBytes = 1;
  static constexpr float kMax = 448.0f;
  static constexpr bool kIntegerDots = false;
  // Nothing writes the NaN pattern, and the kernels do not test for it in a cache they are given: it widens
  // to a finite value (Widened).
  static constexpr bool kMayHoldNonFinite = false;
  // The kernels widen a byte s.eeee.mmm through float16: the half with bits (s << 15) | (eeeemmm << 7) is
  // 2⁻⁸ times the byte's value, normal and subnormal alike (float16's exponent bias 15 = 7 + 8; its subnormal
  // 2⁻¹⁴·(mmm << 7)/2¹⁰ = 2⁻⁸·mmm·2⁻⁹), so the hardware's float16 conversion does the work and the kernels fold
  // 2⁸ into the scales.
  static constexpr float kWideningFactor = 256.0f;
  static constexpr ScaleGranularity kDefaultGranularity = ScaleGranularity::kPerHead;  // vLLM's fp8 cache

  static float Decode(std::uint8_t code) {
    const std::uint32_t magnitude = code & 0x7fu;
    const std::uint32_t sign = static_cast<std::uint32_t>(code & 0x80u) << 24;
    if (magnitude == 0x7fu) return std::bit_cast<float>(sign | 0x7fc00000u);
    if (magnitude < 8) {  // subnormal or zero: m·2⁻⁹, exact in float32
      const float value = static_cast<float>(magnitude) * 0x1p-9f;
      return sign ? -value : value;
    }
    // Normal: the exponent rebiased by 127 − 7, the 3 mantissa bits on top of float32's 23.
    return std::bit_cast<float>(sign | ((magnitude << 20) + (120u << 23)));
  }
  // Rounds to nearest even; beyond ±448 saturates to ±448 (OCP's saturating conversion); NaN gives NaN.
  static constexpr int kExponentBits = 4, kMantissaBits = 3;
  static constexpr std::uint8_t kMaxCode = 0x7e;  // S.1111.110 = 448
  static std::uint8_t Encode(float x) { return Fp8Rounding<CacheElementTraits>::Encode(x); }
  // The float16 bits the kernels widen (see kWideningFactor).
  static std::uint16_t F16Bits(std::uint8_t code) {
    return static_cast<std::uint16_t>(((code & 0x80u) << 8) | ((code & 0x7fu) << 7));
  }
  // Decode(code) / 2⁸, but the NaN pattern S.1111.111 widens to ±1.875, i.e. reads as ±480.
  static float Widened(std::uint8_t code) { return F32FromF16(F16Bits(code)); }
  // Half a step: 2⁻⁴ of x's binade, and 2⁻¹⁰ among subnormals.
  static double MaxRoundingError(double x) { return std::max(std::fabs(x) * 0x1p-4, 0x1p-10); }
};

// OCP FP8 E5M2: sign, 5 exponent bits of bias 15, 2 mantissa bits, which is the upper byte of an IEEE float16.
// Exponent 0 holds subnormals m·2⁻¹⁶; S.11111.00 is ±inf and S.11111.xx (xx ≠ 0) NaN, so the largest finite
// value is 1.75·2¹⁵ = 57344.
template <>
struct CacheElementTraits<Fp8E5M2> {
  using Storage = Fp8E5M2;
  static constexpr CacheElement kElement = CacheElement::kFp8E5M2;
  static constexpr std::string_view kName = "fp8_e5m2";
  static constexpr bool kQuantized = true;
  static constexpr std::int64_t kBytes = 1;
  static constexpr float kMax = 57344.0f;
  static constexpr bool kIntegerDots = false;
  // Nothing writes an inf or a NaN code, but a cache given to decode may hold one: it reads as inf or NaN, as
  // in a float cache.
  static constexpr bool kMayHoldNonFinite = true;
  static constexpr float kWideningFactor = 1.0f;  // widened exactly through float16
  static constexpr ScaleGranularity kDefaultGranularity = ScaleGranularity::kPerHead;

  static float Decode(std::uint8_t code) { return F32FromF16(static_cast<std::uint16_t>(code << 8)); }
  // Rounds to nearest even; a finite x beyond ±57344 saturates to ±57344 (as vLLM's saturating FP8
  // conversion), and so does ±inf; NaN gives the NaN S.11111.11.
  static constexpr int kExponentBits = 5, kMantissaBits = 2;
  static constexpr std::uint8_t kMaxCode = 0x7b;  // S.11110.11 = 57344
  static std::uint8_t Encode(float x) { return Fp8Rounding<CacheElementTraits>::Encode(x); }
  static float Widened(std::uint8_t code) { return Decode(code); }  // exactly, through float16
  // Half a step: 2⁻³ of x's binade, and 2⁻¹⁷ among subnormals.
  static double MaxRoundingError(double x) { return std::max(std::fabs(x) * 0x1p-3, 0x1p-17); }
};

using Int8Traits = CacheElementTraits<std::int8_t>;
using E4M3Traits = CacheElementTraits<Fp8E4M3>;
using E5M2Traits = CacheElementTraits<Fp8E5M2>;

// f(Traits{}) with the traits of `element`, and its result: the one switch from a CacheElement to its traits.
// A float cache gets FloatCacheTraits (its storage type is its cache_dtype's); a value outside the enum (a
// byte cast by a C caller) throws Error.
template <typename F>
decltype(auto) VisitCacheElement(CacheElement element, F&& f) {
  switch (element) {
    case CacheElement::kFloat: return f(FloatCacheTraits{});
    case CacheElement::kInt8: return f(Int8Traits{});
    case CacheElement::kFp8E4M3: return f(E4M3Traits{});
    case CacheElement::kFp8E5M2: return f(E5M2Traits{});
  }
  Fail("cache element has an unknown value ", static_cast<int>(element));
}

// The last of CacheElement's values, the switch's last case: the values after it are no element type.
inline constexpr CacheElement kLastCacheElement = CacheElement::kFp8E5M2;

// Whether `element` is one of CacheElement's values (each has traits).
inline bool IsCacheElement(CacheElement element) {
  try {
    VisitCacheElement(element, [](auto) {});
    return true;
  } catch (const Error&) {
    return false;
  }
}

// VisitCacheElement for a quantized element, f taking the traits of every quantized type (and returning one
// type); a float cache throws Error.
template <typename F>
decltype(auto) VisitQuantizedElement(CacheElement element, F&& f) {
  return VisitCacheElement(element, [&](auto traits) -> decltype(f(Int8Traits{})) {
    if constexpr (decltype(traits)::kQuantized) {
      return f(traits);
    } else {
      Fail("a float cache (cache_element=float) has no quantized elements");
    }
  });
}

// One element of a quantized cache as the kernels widen it (Widened) in their scalar tails.
template <typename T>
  requires CacheElementTraits<T>::kQuantized
HWY_INLINE float ToF32(T x) {
  return CacheElementTraits<T>::Widened(std::bit_cast<std::uint8_t>(x));
}

}  // namespace flashattn

#endif  // FLASHATTN_COMMON_CACHE_ELEMENT_TRAITS_H_
