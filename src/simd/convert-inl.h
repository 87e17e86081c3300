// Element conversion for every kernel, per Highway target (include after hwy/highway.h): float16/bfloat16
// and the quantized caches' elements (VectorCodec: int8, FP8 E4M3, FP8 E5M2) widened to float32 a vector at a
// time as they are loaded, the quantized codes of float32 vectors, whole rows widened (and scaled) into
// zero-padded float32 rows, and the test for inf and NaN that sends a tile to the paths that leave hidden keys
// out. The scalar conversions of single elements are common/element.h's and common/cache_element_traits.h's.
#if defined(FLASHATTN_SIMD_CONVERT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_SIMD_CONVERT_INL_H_
#undef FLASHATTN_SIMD_CONVERT_INL_H_
#else
#define FLASHATTN_SIMD_CONVERT_INL_H_
#endif

#include <algorithm>
#include <bit>
#include <cstdint>

#include "common/cache_element_traits.h"
#include "common/element.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Highway 1.0.3 widens float16 by integer emulation where the CPU has no conversion instruction (x86 below
// AVX2, EMU128, SCALAR, 32-bit Arm), and that emulation turns inf and NaN (exponent 31) into finite values.
// Those targets correct the exponent-31 lanes after widening.
#if (HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 && !defined(HWY_DISABLE_F16C)) || \
    (HWY_ARCH_ARM_A64 && HWY_TARGET != HWY_EMU128 && HWY_TARGET != HWY_SCALAR)
inline constexpr bool kNativeF16Widening = true;
#else
inline constexpr bool kNativeF16Widening = false;
#endif

// float32 of the float16 bit patterns `bits` (as many lanes as DF's): the hardware conversion, and where it is
// emulated, the exponent-31 lanes (inf, NaN) set to sign, all-ones exponent, mantissa << 13 (payload kept).
HWY_INLINE VF F32FromF16Bits(DF df, hn::Vec<hn::Rebind<std::uint16_t, DF>> bits) {
  const VF wide = hn::PromoteTo(df, hn::BitCast(hn::Rebind<hwy::float16_t, DF>(), bits));
  if constexpr (kNativeF16Widening) {
    return wide;
  } else {
    const hn::RebindToUnsigned<DF> du;
    const auto bits32 = hn::PromoteTo(du, bits);
    const auto exponent_mask = hn::Set(du, 0x7C00u);
    const auto special = hn::Eq(hn::And(bits32, exponent_mask), exponent_mask);
    const auto inf_or_nan = hn::Or(hn::Or(hn::ShiftLeft<16>(hn::And(bits32, hn::Set(du, 0x8000u))),
                                          hn::Set(du, 0x7F800000u)),
                                   hn::ShiftLeft<13>(hn::And(bits32, hn::Set(du, 0x3FFu))));
    return hn::IfThenElse(hn::RebindMask(df, special), hn::BitCast(df, inf_or_nan), wide);
  }
}

// One vector of float32 from `Lanes(df)` consecutive elements of T.
HWY_INLINE VF LoadF32(DF df, const float* p) { return hn::LoadU(df, p); }
HWY_INLINE VF LoadF32(DF df, const hwy::float16_t* p) {
  const hn::Rebind<std::uint16_t, DF> d16;
  return F32FromF16Bits(df, hn::LoadU(d16, reinterpret_cast<const std::uint16_t*>(p)));
}
HWY_INLINE VF LoadF32(DF df, const hwy::bfloat16_t* p) {
  return hn::PromoteTo(df, hn::LoadU(hn::Rebind<hwy::bfloat16_t, DF>(), p));
}

// The vector side of each quantized cache element type, next to each other (common/cache_element_traits.h has
// their scalar side): Widen loads Lanes(df) codes as float32, each its value / kWideningFactor (Widened), and
// Codes gives each lane's code (Encode, the same operations lane by lane) as an int32 in [0, 255].
template <typename Storage>
struct VectorCodec;  // one specialization per quantized storage type

using VCodes = hn::Vec<hn::RebindToSigned<DF>>;  // codes in int32 lanes

template <>
struct VectorCodec<std::int8_t> {
  // Widened to int32, converted exactly.
  static HWY_INLINE VF Widen(DF df, const std::int8_t* p) {
    const hn::Rebind<std::int32_t, DF> di;
    return hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(hn::Rebind<std::int8_t, DF>(), p)));
  }
  // Saturated to ±127, rounded to nearest even; the two's complement byte.
  static HWY_INLINE VCodes Codes(VF x) {
    const DF df;
    const hn::RebindToSigned<DF> di;
    const VF clamped = hn::Min(hn::Max(x, hn::Set(df, -127.0f)), hn::Set(df, 127.0f));
    const VF two23 = hn::Set(df, 0x1p23f);
    const VF rounded = hn::Sub(hn::Add(hn::Abs(clamped), two23), two23);
    const auto q = hn::ConvertTo(di, hn::IfThenElse(hn::Lt(clamped, hn::Zero(df)), hn::Neg(rounded), rounded));
    return hn::And(q, hn::Set(di, 0xff));
  }
};

// An FP8 format's codes lane by lane: Fp8Rounding's steps (common/cache_element_traits.h), each lane taking
// its case's result.
template <typename Traits>
HWY_INLINE VCodes Fp8Codes(VF x) {
  using R = Fp8Rounding<Traits>;
  const DF df;
  const hn::RebindToSigned<DF> di;
  const auto u = hn::BitCast(di, x);
  const auto sign = hn::And(hn::ShiftRight<24>(u), hn::Set(di, 0x80));
  const auto abs = hn::And(u, hn::Set(di, 0x7fffffff));
  const VF two23 = hn::Set(df, 0x1p23f);
  const VF subnormal_rounded =
      hn::Sub(hn::Add(hn::Mul(hn::BitCast(df, abs), hn::Set(df, R::kSubnormalScale)), two23), two23);
  const auto subnormal = hn::ConvertTo(di, subnormal_rounded);
  const auto rebiased = hn::Sub(abs, hn::Set(di, static_cast<std::int32_t>(R::kRebias)));
  const auto kept_bit = hn::And(hn::ShiftRight<R::kDroppedBits>(rebiased), hn::Set(di, 1));
  const auto normal = hn::ShiftRight<R::kDroppedBits>(
      hn::Add(rebiased, hn::Add(hn::Set(di, static_cast<std::int32_t>(R::kBelowHalf)), kept_bit)));
  auto code = hn::IfThenElse(hn::Lt(abs, hn::Set(di, static_cast<std::int32_t>(R::kSmallestNormalBits))),
                             subnormal, normal);
  const auto max_bits = static_cast<std::int32_t>(R::kMaxBits);
  code = hn::IfThenElse(hn::Gt(abs, hn::Set(di, max_bits - 1)), hn::Set(di, R::kMaxCode), code);  // ≥ kMax
  code = hn::IfThenElse(hn::Gt(abs, hn::Set(di, 0x7f800000)), hn::Set(di, R::kNanCode), code);
  return hn::Or(sign, code);
}

template <>
struct VectorCodec<Fp8E4M3> {
  // Through float16 (E4M3Traits::F16Bits): the bytes sign-extended to 16 bits and shifted left by 7 put
  // eeeemmm in place and the sign in bits 14 and 15; bit 14 cleared, the hardware's float16 conversion gives
  // 2⁻⁸ times the value (the scales carry 2⁸).
  static HWY_INLINE VF Widen(DF df, const Fp8E4M3* p) {
    const hn::Rebind<std::int8_t, DF> d8;
    const hn::Rebind<std::int16_t, DF> d16;
    const auto bytes = hn::PromoteTo(d16, hn::LoadU(d8, reinterpret_cast<const std::int8_t*>(p)));
    const auto half_bits = hn::And(hn::ShiftLeft<7>(bytes), hn::Set(d16, static_cast<std::int16_t>(0xBF80)));
    return hn::PromoteTo(df, hn::BitCast(hn::Rebind<hwy::float16_t, DF>(), half_bits));
  }
  static HWY_INLINE VCodes Codes(VF x) { return Fp8Codes<E4M3Traits>(x); }
};

template <>
struct VectorCodec<Fp8E5M2> {
  // The upper byte of a float16: the bytes shifted into the upper half of 16-bit lanes widen exactly, inf and
  // NaN included.
  static HWY_INLINE VF Widen(DF df, const Fp8E5M2* p) {
    const hn::Rebind<std::uint8_t, DF> d8;
    const hn::Rebind<std::uint16_t, DF> d16;
    const auto bytes = hn::PromoteTo(d16, hn::LoadU(d8, reinterpret_cast<const std::uint8_t*>(p)));
    return F32FromF16Bits(df, hn::ShiftLeft<8>(bytes));
  }
  static HWY_INLINE VCodes Codes(VF x) { return Fp8Codes<E5M2Traits>(x); }
};

// A quantized cache's elements, widened by their codec.
template <typename T>
  requires CacheElementTraits<T>::kQuantized
HWY_INLINE VF LoadF32(DF df, const T* p) {
  return VectorCodec<T>::Widen(df, p);
}

// What LoadF32 and ToF32 leave out of an element's value (the traits' kWideningFactor: 2⁸ for FP8 E4M3, else
// 1). A quantized row's scales are multiplied by it.
template <typename T>
inline constexpr float kWideningFactor = CacheElementTraits<T>::kWideningFactor;

// Whether n elements (n a multiple of Lanes) hold an inf or a NaN: the test that sends a tile with hidden
// keys to the paths that leave them out instead of multiplying their zero weight by it (0·NaN = NaN).
template <typename T>
bool HasNonFinite(const T* x, std::int64_t n) {
  const DF df;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(df));
  auto finite = hn::IsFinite(hn::Zero(df));
  for (std::int64_t e = 0; e < n; e += L) finite = hn::And(finite, hn::IsFinite(LoadF32(df, x + e)));
  return !hn::AllTrue(df, finite);
}

// dst[0, width_pad) = s·float32(src[0, width)), zero beyond width (s = 1: no multiply when !kScaled): a
// vector at a time (F16C on x86), then element by element.
template <bool kScaled, typename T>
HWY_INLINE void WidenRowTimes(const T* HWY_RESTRICT src, std::int64_t width, std::int64_t width_pad, float s,
                              float* HWY_RESTRICT dst) {
  const DF df;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(df));
  const VF scale = hn::Set(df, s);
  std::int64_t e = 0;
  for (; e + L <= width; e += L) {
    const VF wide = LoadF32(df, src + e);
    hn::StoreU(kScaled ? hn::Mul(scale, wide) : wide, df, dst + e);
  }
  for (; e < width; ++e) dst[e] = kScaled ? s * ToF32(src[e]) : ToF32(src[e]);
  for (; e < width_pad; ++e) dst[e] = 0.0f;
}

// A row in float32, zero-padded: K, V and dO rows, and the packing of float16/bfloat16 K and V.
template <typename T>
HWY_INLINE void WidenRow(const T* HWY_RESTRICT src, std::int64_t width, std::int64_t width_pad,
                         float* HWY_RESTRICT dst) {
  WidenRowTimes<false>(src, width, width_pad, 1.0f, dst);
}

// A quantized cache row dequantized, zero-padded: dst[e] = scales[e / g]·value(src[e]) for e < width.
template <typename T>
HWY_INLINE void DequantizeRow(const T* HWY_RESTRICT src, std::int64_t width, std::int64_t width_pad,
                              const float* HWY_RESTRICT scales, std::int64_t g, float* HWY_RESTRICT dst) {
  for (std::int64_t e0 = 0; e0 < width; e0 += g) {
    const std::int64_t n = std::min(g, width - e0);  // V inside the K rows: one scale covers d > width features
    WidenRowTimes<true>(src + e0, n, n, scales[e0 / g] * kWideningFactor<T>, dst + e0);
  }
  for (std::int64_t e = width; e < width_pad; ++e) dst[e] = 0.0f;
}

// A query row pre-scaled by the softmax scale s: s·q, zero-padded.
template <typename T>
HWY_INLINE void WidenScaledRow(const T* HWY_RESTRICT src, std::int64_t width, std::int64_t width_pad, float s,
                               float* HWY_RESTRICT dst) {
  WidenRowTimes<true>(src, width, width_pad, s, dst);
}

}  // namespace flashattn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_SIMD_CONVERT_INL_H_
