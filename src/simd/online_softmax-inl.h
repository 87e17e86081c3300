// The online-softmax steps of one tile row while the strip S_ij is in L1 (per Highway target):
//   m_new = max(m, RowMax(S_r))
//   α = e^{m − m_new},  P̃_r = e^{S_r − m_new} (in place),  l = α·l + RowSum(P̃_r)
// and the final step O = Õ / l, LSE = m + log l. A row starts from (m, l) = (−∞, 0), or from (s_h, 1) with an
// attention sink s_h (SoftmaxRowStart, common/score.h): the sink is a logit seen before the first key, which
// adds to l and nothing to Õ. A row that has seen only −∞ keeps m = −∞; its exponents are then taken
// relative to 0 instead, so that α = e^{−∞} = 0 and P̃ = 0, never e^{−∞ − (−∞)} = NaN.
#if defined(FLASHATTN_SIMD_ONLINE_SOFTMAX_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_SIMD_ONLINE_SOFTMAX_INL_H_
#undef FLASHATTN_SIMD_ONLINE_SOFTMAX_INL_H_
#else
#define FLASHATTN_SIMD_ONLINE_SOFTMAX_INL_H_
#endif

#include <cmath>
#include <cstdint>

#include "common/constants.h"
#include "hwy/highway.h"
#include "simd/exp-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// max_c S[c] over `n` elements, n a multiple of Lanes (the strip is padded with −∞).
HWY_INLINE float RowMax(const float* HWY_RESTRICT S, std::int64_t n) {
  const hn::ScalableTag<float> df;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(df));
  auto max0 = hn::Set(df, kNegInf), max1 = max0;
  std::int64_t c = 0;
  for (; c + 2 * L <= n; c += 2 * L) {
    max0 = hn::Max(max0, hn::Load(df, S + c));
    max1 = hn::Max(max1, hn::Load(df, S + c + L));
  }
  if (c < n) max0 = hn::Max(max0, hn::Load(df, S + c));
  return hn::GetLane(hn::MaxOfLanes(df, hn::Max(max0, max1)));
}

// S[c] ← e^{S[c] − m} for n elements (a multiple of Lanes; m ≥ every S[c], so the arguments are ≤ 0);
// returns their sum.
HWY_INLINE float ExpAndRowSum(float* HWY_RESTRICT S, std::int64_t n, float m) {
  const hn::ScalableTag<float> df;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(df));
  const auto vm = hn::Set(df, m);
  auto sum0 = hn::Zero(df), sum1 = sum0;
  std::int64_t c = 0;
  for (; c + 2 * L <= n; c += 2 * L) {
    const auto p0 = ExpOfNonPositive(df, hn::Sub(hn::Load(df, S + c), vm));
    const auto p1 = ExpOfNonPositive(df, hn::Sub(hn::Load(df, S + c + L), vm));
    hn::Store(p0, df, S + c);
    hn::Store(p1, df, S + c + L);
    sum0 = hn::Add(sum0, p0);
    sum1 = hn::Add(sum1, p1);
  }
  if (c < n) {
    const auto p0 = ExpOfNonPositive(df, hn::Sub(hn::Load(df, S + c), vm));
    hn::Store(p0, df, S + c);
    sum0 = hn::Add(sum0, p0);
  }
  return hn::GetLane(hn::SumOfLanes(df, hn::Add(sum0, sum1)));
}

// How l ← α·l + Σ_c P̃_c is rounded. Decode has always computed it with one rounding (a fused multiply-add
// where the target has one), the forward pass with two (the compiler leaves α·l + Σ as written there); each
// kernel keeps its own, so that its results stay bit for bit what they were.
enum class SumUpdate {
  kFusedMultiplyAdd,  // decode
  kProductThenSum,    // the forward pass
};

// The online update of one row's state (m, l) by a strip of `n` scores; P̃ replaces S in place.
// Returns α = e^{m_old − m_new}, the factor that rescales the row's accumulator.
template <SumUpdate kUpdate>
HWY_INLINE float OnlineSoftmaxRow(float* HWY_RESTRICT S, std::int64_t n, float& m, float& l) {
  const float m_new = std::max(m, RowMax(S, n));
  const float m_ref = m_new == kNegInf ? 0.0f : m_new;  // exponents relative to a finite reference
  // α = e^{m − m_ref}: exactly 1 while the maximum stands (most strips once it has settled), without a call
  const float alpha = m == m_ref ? 1.0f : std::exp(m - m_ref);
  if constexpr (kUpdate == SumUpdate::kFusedMultiplyAdd) {
    const hn::CappedTag<float, 1> d1;
    l = hn::GetLane(hn::MulAdd(hn::Set(d1, alpha), hn::Set(d1, l), hn::Set(d1, ExpAndRowSum(S, n, m_ref))));
  } else {
    l = alpha * l + ExpAndRowSum(S, n, m_ref);
  }
  m = m_new;
  return alpha;
}

// O = Õ / l and LSE = m + log l for one row; a row that saw no key (l = 0) gives O = 0 and LSE = −∞ (with a
// sink, l ≥ 1 relative to m ≥ s_h, and such a row gives O = 0, LSE = s_h).
HWY_INLINE float NormalizeAndLse(float* HWY_RESTRICT O, std::int64_t n, float m, float l) {
  const hn::ScalableTag<float> df;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(df));
  const auto inv_l = hn::Set(df, l == 0.0f ? 0.0f : 1.0f / l);
  for (std::int64_t c = 0; c < n; c += L) hn::Store(hn::Mul(hn::Load(df, O + c), inv_l), df, O + c);
  return l == 0.0f ? kNegInf : m + std::log(l);
}

}  // namespace flashattn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_SIMD_ONLINE_SOFTMAX_INL_H_
