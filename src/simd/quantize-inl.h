// Quantization of float rows into a cache's int8 or FP8 E4M3 bytes, a vector at a time, per Highway target
// (include after hwy/highway.h): the same bytes and scales as common/quantize.h's scalar QuantizeRow, which
// the decode kernel's append and the reference decode use, by the same float operations lane by lane (the
// quotient x / scale, not a product with its reciprocal; rounding by adding and subtracting 2²³).
#if defined(FLASHATTN_SIMD_QUANTIZE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_SIMD_QUANTIZE_INL_H_
#undef FLASHATTN_SIMD_QUANTIZE_INL_H_
#else
#define FLASHATTN_SIMD_QUANTIZE_INL_H_
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "common/element.h"
#include "common/quantize.h"
#include "hwy/highway.h"
#include "simd/convert-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE {

// max|x[e]| over e < n.
template <typename T>
HWY_INLINE float MaxAbs(const T* HWY_RESTRICT x, std::int64_t n) {
  const DF df;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(df));
  VF max_abs = hn::Zero(df);
  std::int64_t e = 0;
  for (; e + L <= n; e += L) max_abs = hn::Max(max_abs, hn::Abs(LoadF32(df, x + e)));
  float m = hn::GetLane(hn::MaxOfLanes(df, max_abs));
  for (; e < n; ++e) m = std::max(m, std::fabs(ToF32(x[e])));
  return m;
}

// The int8 of each lane of x / scale as int32 (I8FromF32): saturated to ±127, rounded to nearest even.
HWY_INLINE hn::Vec<hn::RebindToSigned<DF>> Int8Codes(VF unscaled) {
  const DF df;
  const hn::RebindToSigned<DF> di;
  const VF clamped = hn::Min(hn::Max(unscaled, hn::Set(df, -127.0f)), hn::Set(df, 127.0f));
  const VF two23 = hn::Set(df, 0x1p23f);
  const VF rounded = hn::Sub(hn::Add(hn::Abs(clamped), two23), two23);
  return hn::ConvertTo(di, hn::IfThenElse(hn::Lt(clamped, hn::Zero(df)), hn::Neg(rounded), rounded));
}

// The FP8 E4M3 code of each lane of x as int32 (E4M3FromF32): NaN, saturation at 448, subnormals below 2⁻⁶
// (x·2⁹ rounded to nearest even), and normals (the exponent rebiased, 20 mantissa bits rounded off to nearest
// even), each lane taking its case's result.
HWY_INLINE hn::Vec<hn::RebindToSigned<DF>> E4M3Codes(VF x) {
  const DF df;
  const hn::RebindToSigned<DF> di;
  const auto u = hn::BitCast(di, x);
  const auto sign = hn::And(hn::ShiftRight<24>(u), hn::Set(di, 0x80));
  const auto abs = hn::And(u, hn::Set(di, 0x7fffffff));
  const VF two23 = hn::Set(df, 0x1p23f);
  const VF subnormal_rounded = hn::Sub(hn::Add(hn::Mul(hn::BitCast(df, abs), hn::Set(df, 0x1p9f)), two23), two23);
  const auto subnormal = hn::ConvertTo(di, subnormal_rounded);
  const auto rebiased = hn::Sub(abs, hn::Set(di, 120 << 23));
  const auto normal = hn::ShiftRight<20>(
      hn::Add(rebiased, hn::Add(hn::Set(di, 0x7ffff), hn::And(hn::ShiftRight<20>(rebiased), hn::Set(di, 1)))));
  auto code = hn::IfThenElse(hn::Lt(abs, hn::Set(di, 0x3c800000)), subnormal, normal);
  const auto max_bits = static_cast<std::int32_t>(std::bit_cast<std::uint32_t>(kFp8E4M3Max));
  code = hn::IfThenElse(hn::Gt(abs, hn::Set(di, max_bits - 1)), hn::Set(di, 0x7e), code);  // abs ≥ 448
  code = hn::IfThenElse(hn::Gt(abs, hn::Set(di, 0x7f800000)), hn::Set(di, 0x7f), code);
  return hn::Or(sign, code);
}

// dst[e] = the code of x[e] / scale (every code 0 when scale is 0), e < n, as EncodeQuantized gives it.
template <typename T>
HWY_INLINE void EncodeRow(const T* HWY_RESTRICT x, std::int64_t n, float scale, CacheElement element,
                          std::uint8_t* HWY_RESTRICT dst) {
  const DF df;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(df));
  const VF divisor = hn::Set(df, scale);
  std::int64_t e = 0;
  if (element == CacheElement::kInt8) {
    const hn::Rebind<std::int8_t, DF> d8;
    for (; e + L <= n; e += L) {
      const VF unscaled = scale == 0.0f ? hn::Zero(df) : hn::Div(LoadF32(df, x + e), divisor);
      hn::StoreU(hn::DemoteTo(d8, Int8Codes(unscaled)), d8, reinterpret_cast<std::int8_t*>(dst + e));
    }
  } else {
    const hn::Rebind<std::uint8_t, DF> du8;
    for (; e + L <= n; e += L) {
      const VF unscaled = scale == 0.0f ? hn::Zero(df) : hn::Div(LoadF32(df, x + e), divisor);
      hn::StoreU(hn::DemoteTo(du8, E4M3Codes(unscaled)), du8, dst + e);
    }
  }
  for (; e < n; ++e) dst[e] = EncodeQuantized(ToF32(x[e]), scale, element);
}

// QuantizeRow (common/quantize.h) of a row of d elements of T: with per-token scales, one per group of g
// features written to `scales`; otherwise with the fixed scale *scales.
template <typename T>
HWY_INLINE void QuantizeRowOf(const T* HWY_RESTRICT x, std::int64_t d, CacheElement element,
                              ScaleGranularity granularity, std::int64_t group_size, float* scales,
                              std::uint8_t* HWY_RESTRICT dst) {
  const bool per_token = granularity == ScaleGranularity::kPerToken;
  const std::int64_t g = per_token ? ScaleGroupSize(group_size, d) : d;
  for (std::int64_t e0 = 0, group = 0; e0 < d; e0 += g, group += per_token ? 1 : 0) {
    if (per_token) scales[group] = MaxAbs(x + e0, g) / QuantMax(element);
    EncodeRow(x + e0, g, scales[group], element, dst + e0);
  }
}

}  // namespace flashattn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_SIMD_QUANTIZE_INL_H_
