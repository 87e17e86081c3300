// Element conversion for every kernel, per Highway target (include after hwy/highway.h): float16/bfloat16
// and the quantized caches' int8 and FP8 E4M3 widened to float32 a vector at a time as they are loaded, whole rows widened (and scaled) into zero-padded
// float32 rows, and the test for inf and NaN that sends a tile to the paths that leave hidden keys out. The
// scalar conversions of single elements are common/element.h's.
#if defined(FLASHATTN_SIMD_CONVERT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_SIMD_CONVERT_INL_H_
#undef FLASHATTN_SIMD_CONVERT_INL_H_
#else
#define FLASHATTN_SIMD_CONVERT_INL_H_
#endif

#include <algorithm>
#include <cstdint>

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

// One vector of float32 from `Lanes(df)` consecutive elements of T.
HWY_INLINE VF LoadF32(DF df, const float* p) { return hn::LoadU(df, p); }
HWY_INLINE VF LoadF32(DF df, const hwy::float16_t* p) {
  const hn::Rebind<hwy::float16_t, DF> df16;
  const auto half = hn::LoadU(df16, p);
  const VF wide = hn::PromoteTo(df, half);
  if constexpr (kNativeF16Widening) {
    return wide;
  } else {  // exponent 31: sign, all-ones exponent, mantissa << 13 (inf or NaN, payload kept)
    const hn::RebindToUnsigned<DF> du;
    const auto bits = hn::PromoteTo(du, hn::BitCast(hn::Rebind<std::uint16_t, DF>(), half));
    const auto exponent_mask = hn::Set(du, 0x7C00u);
    const auto special = hn::Eq(hn::And(bits, exponent_mask), exponent_mask);
    const auto inf_or_nan = hn::Or(hn::Or(hn::ShiftLeft<16>(hn::And(bits, hn::Set(du, 0x8000u))),
                                          hn::Set(du, 0x7F800000u)),
                                   hn::ShiftLeft<13>(hn::And(bits, hn::Set(du, 0x3FFu))));
    return hn::IfThenElse(hn::RebindMask(df, special), hn::BitCast(df, inf_or_nan), wide);
  }
}
HWY_INLINE VF LoadF32(DF df, const hwy::bfloat16_t* p) {
  return hn::PromoteTo(df, hn::LoadU(hn::Rebind<hwy::bfloat16_t, DF>(), p));
}

// int8: widened to int32, converted exactly.
HWY_INLINE VF LoadF32(DF df, const std::int8_t* p) {
  const hn::Rebind<std::int32_t, DF> di;
  return hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(hn::Rebind<std::int8_t, DF>(), p)));
}
// FP8 E4M3 through float16 (common/element.h, F16BitsOfE4M3): the bytes sign-extended to 16 bits and shifted
// left by 7 put eeeemmm in place and the sign in bits 14 and 15; bit 14 cleared, the hardware's float16
// conversion gives 2⁻⁸ times the value (kWideningFactor: the scales carry 2⁸).
HWY_INLINE VF LoadF32(DF df, const Fp8E4M3* p) {
  const hn::Rebind<std::int8_t, DF> d8;
  const hn::Rebind<std::int16_t, DF> d16;
  const auto bytes = hn::PromoteTo(d16, hn::LoadU(d8, reinterpret_cast<const std::int8_t*>(p)));
  const auto half_bits = hn::And(hn::ShiftLeft<7>(bytes), hn::Set(d16, static_cast<std::int16_t>(0xBF80)));
  return hn::PromoteTo(df, hn::BitCast(hn::Rebind<hwy::float16_t, DF>(), half_bits));
}

// What LoadF32 and ToF32 leave out of an element's value: 2⁸ for FP8 E4M3, else 1. A quantized row's scales
// are multiplied by it.
template <typename T>
inline constexpr float kWideningFactor = 1.0f;
template <>
inline constexpr float kWideningFactor<Fp8E4M3> = kE4M3WideningFactor;

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
