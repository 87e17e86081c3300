// Quantization of float rows into a quantized cache's codes, a vector at a time, per Highway target
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

#include "common/cache_element_traits.h"
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

// dst[e] = the code of x[e] / scale in the element type of Traits (every code 0 when scale is 0), e < n, as
// EncodeScaled gives it: VectorCodec's codes a vector at a time.
template <typename Traits, typename T>
HWY_INLINE void EncodeRow(const T* HWY_RESTRICT x, std::int64_t n, float scale, std::uint8_t* HWY_RESTRICT dst) {
  const DF df;
  const hn::Rebind<std::uint8_t, DF> du8;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(df));
  const VF divisor = hn::Set(df, scale);
  std::int64_t e = 0;
  for (; e + L <= n; e += L) {
    const VF unscaled = scale == 0.0f ? hn::Zero(df) : hn::Div(LoadF32(df, x + e), divisor);
    hn::StoreU(hn::DemoteTo(du8, VectorCodec<typename Traits::Storage>::Codes(unscaled)), du8, dst + e);
  }
  for (; e < n; ++e) dst[e] = EncodeScaled<Traits>(ToF32(x[e]), scale);
}

// QuantizeRow (common/quantize.h) of a row of d elements of T into the element type of Traits: with per-token
// scales, one per group of g features written to `scales`; otherwise with the fixed scale *scales.
template <typename Traits, typename T>
HWY_INLINE void QuantizeRowAs(const T* HWY_RESTRICT x, std::int64_t d, ScaleGranularity granularity,
                              std::int64_t group_size, float* scales, std::uint8_t* HWY_RESTRICT dst) {
  const bool per_token = granularity == ScaleGranularity::kPerToken;
  const std::int64_t g = per_token ? ScaleGroupSize(group_size, d) : d;
  for (std::int64_t e0 = 0, group = 0; e0 < d; e0 += g, group += per_token ? 1 : 0) {
    if (per_token) scales[group] = MaxAbs(x + e0, g) / Traits::kMax;
    EncodeRow<Traits>(x + e0, g, scales[group], dst + e0);
  }
}

// QuantizeRowAs the run-time element type.
template <typename T>
void QuantizeRowOf(const T* HWY_RESTRICT x, std::int64_t d, CacheElement element, ScaleGranularity granularity,
                   std::int64_t group_size, float* scales, std::uint8_t* HWY_RESTRICT dst) {
  VisitQuantizedElement(element, [&](auto traits) {
    QuantizeRowAs<decltype(traits)>(x, d, granularity, group_size, scales, dst);
  });
}

}  // namespace flashattn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_SIMD_QUANTIZE_INL_H_
