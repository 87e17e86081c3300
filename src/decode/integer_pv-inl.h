// P̃ V of an int8 cache from integer dot products (DecodeParams::quantize_probs_u8), per Highway target;
// include after hwy/highway.h. For each row r of one K/V head and each block of keys, the weights
// w_c = P̃_c · v_scale_c (one scale per V row) are rounded to unsigned bytes relative to the block's largest,
//   u_c = round(w_c · 255 / max_c w),   f = max_c w / 255,
// and then
//   Õ_r = α_r Õ_r + f · (Σ_c u_c · v_c)
// where v_c are the cache's int8 values and the sum is exact: |u·v| ≤ 255·127 and a block holds 32 keys, so
// every partial sum is an integer below 2²⁴, exact in int32 and in float32 alike. AVX3_DL forms it with
// vpdpbusd over four keys at a time, V's bytes interleaved key by key; the other x86 and NEON targets multiply
// pairs of keys, widened to int16 side by side, by pairs of u (vpmaddwd, vmlal); the scalar and SVE targets
// run the float32 P·V tiles over the same integers (exact by the same bound) into zeroed sums. Given the
// weights, every target forms the same sums (the weights come from each target's own float32 softmax), and
// adds them to Õ by the same operations. docs/quantized_cache.md has the accuracy.
#if defined(FLASHATTN_DECODE_INTEGER_PV_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_DECODE_INTEGER_PV_INL_H_
#undef FLASHATTN_DECODE_INTEGER_PV_INL_H_
#else
#define FLASHATTN_DECODE_INTEGER_PV_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "decode/attend_tiles-inl.h"
#include "decode/integer_scores-inl.h"
#include "hwy/highway.h"

// Whether this target forms the sums from pairs of keys in int16 lanes (every target with fixed-size vectors
// but AVX3_DL, which has vpdpbusd, and the scalar one).
#undef FLASHATTN_DECODE_PAIRED_INTEGER_PV  // set again for each target
#if HWY_TARGET != HWY_AVX3_DL && HWY_TARGET != HWY_SCALAR && !FLASHATTN_DECODE_SIZELESS_VECTORS
#define FLASHATTN_DECODE_PAIRED_INTEGER_PV 1
#else
#define FLASHATTN_DECODE_PAIRED_INTEGER_PV 0
#endif

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE::decode_kernel {

static_assert(kBc * 255 * 127 < (1 << 24), "a block's integer sums must be exact in float32");

// The working set of the integer P̃ V of one head: u (R rows × kBc, as WeightCode), the factors f, and, where
// the float tiles form them (!kIntegerPvReadsRawRows), the exact sums (R rows of dv_pad floats).
// The element u is stored as: bytes for vpdpbusd, int16 lanes where pairs of keys are multiplied (two adjacent
// weights load as one broadcast pair), bytes (unused) elsewhere.
using WeightCode = std::conditional_t<FLASHATTN_DECODE_PAIRED_INTEGER_PV, std::uint16_t, std::uint8_t>;

struct IntegerPv {
  WeightCode* u = nullptr;
  float* factor = nullptr;
  float* sum = nullptr;
};

// Whether IntegerAccumulateBlock reads V's int8 rows itself at every d; elsewhere it needs them widened (not
// scaled) into float32 rows when d leaves a partial vector.
inline constexpr bool kIntegerPvReadsRawRows = HWY_TARGET == HWY_AVX3_DL || FLASHATTN_DECODE_PAIRED_INTEGER_PV;

// Rounds the weights w_c = P̃_c·v_scale_c of R rows (P̃ rows kBc apart; w is 0 past `cols`, where P̃ is 0 and so
// is the scale) to u_c, stored as WeightCode in x.u and, for the float tiles of the targets that use them, as
// floats in place of P̃; sets x.factor[r] = max w / 255. A row whose weights are all 0 gets u = 0 and f = 0. A row
// holding a weight that is NaN, infinite or negative (from a V scale that is not a finite non-negative number)
// gets u = 0 and f = NaN, so that its output is NaN rather than silently wrong.
HWY_INLINE void RoundWeights(float* P, const float* HWY_RESTRICT v_scale, std::int64_t R, const IntegerPv& x) {
  const DF df;
  const hn::Rebind<WeightCode, DF> du;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  for (std::int64_t r = 0; r < R; ++r) {
    float* P_r = P + r * kBc;
    const auto weight = [&](std::int64_t c) { return hn::Mul(hn::Load(df, P_r + c), hn::Load(df, v_scale + c)); };
    VF max = hn::Zero(df);
    bool invalid = false;
    for (std::int64_t c = 0; c < kBc; c += N) {
      const VF w = weight(c);
      invalid = invalid || !hn::AllTrue(df, hn::Ge(w, hn::Zero(df)));  // NaN or negative
      max = hn::Max(max, w);
    }
    const float max_w = hn::GetLane(hn::MaxOfLanes(df, max));
    if (invalid || max_w == std::numeric_limits<float>::infinity()) {
      x.factor[r] = std::numeric_limits<float>::quiet_NaN();
      std::fill(P_r, P_r + kBc, 0.0f);
      std::fill(x.u + r * kBc, x.u + (r + 1) * kBc, WeightCode{0});
      continue;
    }
    x.factor[r] = max_w / 255.0f;
    const VF scale = hn::Set(df, max_w > 0.0f ? 255.0f / max_w : 0.0f);
    for (std::int64_t c = 0; c < kBc; c += N) {
      const auto u = hn::NearestInt(hn::Mul(weight(c), scale));  // 0 … 255, to nearest even
      hn::StoreU(hn::DemoteTo(du, u), du, x.u + r * kBc + c);
      if constexpr (!kIntegerPvReadsRawRows) hn::Store(hn::ConvertTo(df, u), df, P_r + c);
    }
  }
}

// α·Õ + f·sum for one vector of Õ, in the same operations on every target.
template <class V>
HWY_INLINE V AddScaledSum(V o, V sum, V a, V f) {
  return hn::MulAdd(f, sum, hn::Mul(a, o));
}

#if HWY_TARGET != HWY_AVX3_DL && !FLASHATTN_DECODE_PAIRED_INTEGER_PV
// Õ_r = α_r Õ_r + f_r · sum_r over `width` features (Õ and the sums dv_pad apart).
HWY_INLINE void AddScaledSums(const float* sum, const float* factor, const float* alpha, std::int64_t R,
                              std::int64_t width, float* O, std::int64_t ldo) {
  const DF df;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  for (std::int64_t r = 0; r < R; ++r) {
    const VF a = hn::Set(df, alpha[r]), f = hn::Set(df, factor[r]);
    for (std::int64_t e = 0; e < width; e += N) {
      const VF sum_e = hn::Load(df, sum + r * ldo + e);
      hn::Store(AddScaledSum(hn::Load(df, O + r * ldo + e), sum_e, a, f), df, O + r * ldo + e);
    }
  }
}

#elif FLASHATTN_DECODE_PAIRED_INTEGER_PV
// The sums of one int32 lane per feature from int16 pairs (key c, key c + 1) of that feature: at most 256 bits,
// 8 features, where 16 features of a key take 128 bits of bytes.
using DPair = hn::CappedTag<std::int16_t, 16>;
using DPairSum = hn::Repartition<std::int32_t, DPair>;
// int16 vectors holding the pairs of 16 features: 2 of 256 bits (x86 from AVX2), or 4 of 128
inline constexpr int kPairVectors = static_cast<int>(16 / hn::MaxLanes(DPairSum()));
// Rows per slice: their sums, with NEON's second accumulators, and the pairs fit in the vector registers.
inline constexpr int kPairRows = kPairVectors == 2 ? 4 : 2;

// Features [e, e + 16) of keys a and b as int16 pairs (a[f], b[f]), in feature order. (A template, so that only
// the branch of this target's vector size is compiled.)
template <class D, int kN>
HWY_INLINE void PairRows(D dp, const std::int8_t* a, const std::int8_t* b, hn::Vec<D> (&pairs)[kN]) {
  const hn::Full128<std::int8_t> d8;
  const auto va = hn::LoadU(d8, a), vb = hn::LoadU(d8, b);
  const auto lo = hn::InterleaveLower(d8, va, vb), hi = hn::InterleaveUpper(d8, va, vb);  // 8 features each
  if constexpr (kN == 2) {
    pairs[0] = hn::PromoteTo(dp, lo);
    pairs[1] = hn::PromoteTo(dp, hi);
  } else {
    const hn::Half<decltype(d8)> d8h;
    pairs[0] = hn::PromoteTo(dp, hn::LowerHalf(d8h, lo));
    pairs[1] = hn::PromoteTo(dp, hn::UpperHalf(d8h, lo));
    pairs[2] = hn::PromoteTo(dp, hn::LowerHalf(d8h, hi));
    pairs[3] = hn::PromoteTo(dp, hn::UpperHalf(d8h, hi));
  }
}

// Õ_r[e0, e0 + 16) = α_r Õ_r + f_r · Σ_{c < keys} u_r[c]·v_c[e0, e0 + 16) for kR rows (Õ rows ldo apart), keys
// an even count. Each pair of keys is multiplied by (u_r[c], u_r[c + 1]) broadcast and added pair by pair into
// the int32 lane of its feature. `each_pair(c)` runs as keys c and c + 1 are reached.
template <int kR, class EachPair>
HWY_INLINE void PairedPvSlice(const std::uint16_t* u, const std::int8_t* const* V, std::int64_t keys,
                              std::int64_t e0, const float* alpha, const float* factor, float* O, std::int64_t ldo,
                              const EachPair& each_pair) {
  const DPair dp;
  const DPairSum di;
  const hn::Rebind<float, DPairSum> df;
  // ReorderWidenMulAccumulate's two sums (NEON splits the products between them; x86 leaves `odd` at 0)
  hn::Vec<DPairSum> even[kR][kPairVectors], odd[kR][kPairVectors];
  HWY_UNROLL(4) for (int r = 0; r < kR; ++r) {
    HWY_UNROLL(4) for (int i = 0; i < kPairVectors; ++i) even[r][i] = odd[r][i] = hn::Zero(di);
  }
  for (std::int64_t c = 0; c < keys; c += 2) {
    each_pair(c);
    hn::Vec<DPair> v[kPairVectors];
    PairRows(dp, V[c] + e0, V[c + 1] + e0, v);
    HWY_UNROLL(4) for (int r = 0; r < kR; ++r) {
      std::int32_t two;  // (u_c, u_{c+1}) as int16 lanes
      __builtin_memcpy(&two, u + r * kBc + c, 4);
      const auto p = hn::BitCast(dp, hn::Set(di, two));
      HWY_UNROLL(4) for (int i = 0; i < kPairVectors; ++i) {
        even[r][i] = hn::ReorderWidenMulAccumulate(di, p, v[i], even[r][i], odd[r][i]);
      }
    }
  }
  constexpr std::int64_t kFeatures = 16 / kPairVectors;
  HWY_UNROLL(4) for (int r = 0; r < kR; ++r) {
    const auto a = hn::Set(df, alpha[r]), f = hn::Set(df, factor[r]);
    HWY_UNROLL(4) for (int i = 0; i < kPairVectors; ++i) {
      const auto sum = hn::ConvertTo(df, hn::RearrangeToOddPlusEven(even[r][i], odd[r][i]));
      float* O_i = O + r * ldo + e0 + i * kFeatures;
      hn::StoreU(AddScaledSum(hn::LoadU(df, O_i), sum, a, f), df, O_i);
    }
  }
}

#else
// Õ_r[e0, e0 + 64) = α_r Õ_r + f_r · sum_r for kR rows (Õ rows dv_pad apart), where
// sum_r = Σ_{c < cols} u_r[c] · v_c[e0, e0 + 64) (features past dv read as 0), for the vectors of 16 features
// that start below dv_pad. V's bytes of four keys are interleaved so that each int32 lane holds one
// feature of the four keys, the operand vpdpbusd multiplies by four u bytes broadcast: lane j of block b of
// interleaved vector i is feature 16b + 4i + j, put back in order (a 4 × 4 transpose of 128-bit blocks) once,
// after the block's keys.
// `each_four(c)` runs as keys c … c + 3 are reached.
template <int kR, class EachFour>
HWY_INLINE void IntegerPvSlice(const std::uint8_t* u, const std::int8_t* const* V, std::int64_t cols,
                               std::int64_t e0, std::int64_t dv, std::int64_t dv_pad, const float* alpha,
                               const float* factor, float* O, const EachFour& each_four) {
  const __mmask64 mask = StepMask(e0, dv);
  __m512i acc[kR][4];
  HWY_UNROLL(4) for (int r = 0; r < kR; ++r) {
    HWY_UNROLL(4) for (int i = 0; i < 4; ++i) acc[r][i] = _mm512_setzero_si512();
  }
  for (std::int64_t c = 0; c < cols; c += 4) {
    each_four(c);
    const __m512i k0 = _mm512_maskz_loadu_epi8(mask, V[c] + e0);
    const __m512i k1 = _mm512_maskz_loadu_epi8(mask, V[c + 1] + e0);
    const __m512i k2 = _mm512_maskz_loadu_epi8(mask, V[c + 2] + e0);
    const __m512i k3 = _mm512_maskz_loadu_epi8(mask, V[c + 3] + e0);
    const __m512i t0 = _mm512_unpacklo_epi8(k0, k1), t1 = _mm512_unpackhi_epi8(k0, k1);
    const __m512i t2 = _mm512_unpacklo_epi8(k2, k3), t3 = _mm512_unpackhi_epi8(k2, k3);
    const __m512i v[4] = {_mm512_unpacklo_epi16(t0, t2), _mm512_unpackhi_epi16(t0, t2),
                          _mm512_unpacklo_epi16(t1, t3), _mm512_unpackhi_epi16(t1, t3)};
    HWY_UNROLL(4) for (int r = 0; r < kR; ++r) {
      std::int32_t four;  // u_r[c … c + 3]
      __builtin_memcpy(&four, u + r * kBc + c, 4);
      const __m512i p = _mm512_set1_epi32(four);
      HWY_UNROLL(4) for (int i = 0; i < 4; ++i) acc[r][i] = DotBytes(acc[r][i], p, v[i]);
    }
  }
  HWY_UNROLL(4) for (int r = 0; r < kR; ++r) {
    const VF a = hn::Set(DF(), alpha[r]), f = hn::Set(DF(), factor[r]);
    const __m512i y0 = _mm512_shuffle_i32x4(acc[r][0], acc[r][1], 0x44);  // blocks 0, 1 of acc 0 and 1
    const __m512i y1 = _mm512_shuffle_i32x4(acc[r][2], acc[r][3], 0x44);
    const __m512i y2 = _mm512_shuffle_i32x4(acc[r][0], acc[r][1], 0xEE);  // blocks 2, 3
    const __m512i y3 = _mm512_shuffle_i32x4(acc[r][2], acc[r][3], 0xEE);
    const __m512i in_order[4] = {_mm512_shuffle_i32x4(y0, y1, 0x88), _mm512_shuffle_i32x4(y0, y1, 0xDD),
                                 _mm512_shuffle_i32x4(y2, y3, 0x88), _mm512_shuffle_i32x4(y2, y3, 0xDD)};
    HWY_UNROLL(4) for (int b = 0; b < 4; ++b) {
      float* O_b = O + r * dv_pad + e0 + 16 * b;
      if (e0 + 16 * b < dv_pad) {
        hn::StoreU(AddScaledSum(hn::LoadU(DF(), O_b), VF{_mm512_cvtepi32_ps(in_order[b])}, a, f), DF(), O_b);
      }
    }
  }
}
#endif

// Õ = diag(α) Õ + diag(f) (U V_j) for the R rows of one head: U rounds the weights P̃_c·v_scale_c (P holds P̃,
// overwritten), V[c] key c's int8 row (raw, readable for dv features; keys past `cols` repeat a real row),
// V_wide[c] the same row widened to float32 and zero-padded to dv_pad where the caller widened it (when d leaves
// a partial vector and !kIntegerPvReadsRawRows), else null. `prefetch_pass(c0, keys)` runs as the keys
// [c0, c0 + keys) are first read, as in AccumulateBlock; `pass_keys` is AccumulateBlock's where it serves.
template <class PrefetchPass>
HWY_INLINE void IntegerAccumulateBlock(float* P, const float* v_scale, const float* alpha,
                                       const std::int8_t* const* V, const float* const* V_wide, std::int64_t R,
                                       std::int64_t cols, std::int64_t dv, std::int64_t dv_pad, float* O,
                                       const IntegerPv& x, [[maybe_unused]] std::int64_t pass_keys,
                                       const PrefetchPass& prefetch_pass) {
  RoundWeights(P, v_scale, R, x);
#if HWY_TARGET == HWY_AVX3_DL
  (void)V_wide;
  const std::int64_t keys = RoundUp(cols, std::int64_t{4});  // u is 0 past cols
  const auto first_reads = [&](std::int64_t c) { prefetch_pass(c, std::min<std::int64_t>(4, cols - c)); };
  for (std::int64_t e0 = 0; e0 < dv; e0 += 64) {
    std::int64_t r = 0;
    const auto slice = [&](auto kR) FLASHATTN_INLINE_LAMBDA {
      constexpr int kRows = decltype(kR)::value;
      const std::uint8_t* u = x.u + r * kBc;
      const float *alpha_r = alpha + r, *factor_r = x.factor + r;
      float* O_r = O + r * dv_pad;
      if (e0 == 0 && r == 0) IntegerPvSlice<kRows>(u, V, keys, e0, dv, dv_pad, alpha_r, factor_r, O_r, first_reads);
      else IntegerPvSlice<kRows>(u, V, keys, e0, dv, dv_pad, alpha_r, factor_r, O_r, kNoKeyRequests);
    };
    for (; r + 4 <= R; r += 4) slice(std::integral_constant<int, 4>());
    for (; r < R; ++r) slice(std::integral_constant<int, 1>());
  }
#elif FLASHATTN_DECODE_PAIRED_INTEGER_PV
  (void)V_wide;
  const std::int64_t keys = RoundUp(cols, std::int64_t{2});  // u is 0 past cols
  const std::int64_t paired_end = dv / 16 * 16;
  const auto first_reads = [&](std::int64_t c) { prefetch_pass(c, std::min<std::int64_t>(2, cols - c)); };
  if (paired_end == 0) prefetch_pass(0, cols);
  for (std::int64_t e0 = 0; e0 < paired_end; e0 += 16) {
    std::int64_t r = 0;
    const auto slice = [&](auto kR) FLASHATTN_INLINE_LAMBDA {
      constexpr int kRows = decltype(kR)::value;
      const std::uint16_t* u = x.u + r * kBc;
      float* O_r = O + r * dv_pad;
      if (e0 == 0 && r == 0) PairedPvSlice<kRows>(u, V, keys, e0, alpha + r, x.factor + r, O_r, dv_pad, first_reads);
      else PairedPvSlice<kRows>(u, V, keys, e0, alpha + r, x.factor + r, O_r, dv_pad, kNoKeyRequests);
    };
    for (; r + kPairRows <= R; r += kPairRows) slice(std::integral_constant<int, kPairRows>());
    for (; r < R; ++r) slice(std::integral_constant<int, 1>());
  }
  // the features past the last 16, one by one (0 past dv), by the same operations
  for (std::int64_t r = 0; r < R; ++r) {
    for (std::int64_t e = paired_end; e < dv_pad; ++e) {
      std::int32_t sum = 0;
      for (std::int64_t c = 0; e < dv && c < cols; ++c) sum += x.u[r * kBc + c] * V[c][e];
      float& o = O[r * dv_pad + e];
      o = std::fma(x.factor[r], static_cast<float>(sum), alpha[r] * o);
    }
  }
#else
  (void)dv;  // the rows hold dv_pad features, zero past dv
  // the float tiles over the integers u_c and v_c: exact, as the int32 sum
  std::fill(x.sum, x.sum + R * dv_pad, 0.0f);
  const auto sums = [&](const auto* const* rows) {
    AccumulateBlock(P, nullptr, rows, R, cols, dv_pad, x.sum, dv_pad, pass_keys, RowScales(), prefetch_pass);
  };
  if (V_wide != nullptr) sums(V_wide);
  else sums(V);
  AddScaledSums(x.sum, x.factor, alpha, R, dv_pad, O, dv_pad);
#endif
}

}  // namespace flashattn::HWY_NAMESPACE::decode_kernel
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_DECODE_INTEGER_PV_INL_H_
