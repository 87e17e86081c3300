// The scores of an int8 cache from integer dot products (DecodeParams::quantize_query_int8), per Highway
// target; include after hwy/highway.h. Each query row is quantized to int8 per group of g features (the
// cache's scale groups) with a scale of its own, and
//   S[r][c] = Σ_groups (dot_group(q_r, k_c) · q_scale[r][group]) · k_scale[c][group]
// where dot_group is the exact int32 dot product of the group's int8 features. Every target computes the
// same exact integers and then the same float operations, so the scores are identical across targets.
// AVX3_DL (AVX-512 VNNI) forms them with vpdpbusd, which multiplies unsigned by signed bytes: k + 128 (k with
// its top bit flipped) times q, its accumulators started at −128·Σq per lane (ComputeQueryOffsets), so that
// they hold Σ q·k. Arm's SVE targets use SDOT (signed by signed bytes), one dot product at a time; the
// other targets widen to int16 and multiply pairs of features into int32 lanes (vpmaddwd, vmlal).
// docs/quantized_cache.md has the accuracy.
#if defined(FLASHATTN_DECODE_INTEGER_SCORES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_DECODE_INTEGER_SCORES_INL_H_
#undef FLASHATTN_DECODE_INTEGER_SCORES_INL_H_
#else
#define FLASHATTN_DECODE_INTEGER_SCORES_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "common/quantize.h"
#include "decode/attend_tiles-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE::decode_kernel {

// Bytes of a quantized query row: whole 64-byte vectors, zero beyond d.
inline std::int64_t QueryInt8Stride(std::int64_t d) { return RoundUp(d, std::int64_t{64}); }

#if HWY_TARGET == HWY_AVX3_DL
// int32 lanes of one vpdpbusd accumulator: its start −128·Σq per lane is kept per (row, group).
inline constexpr std::int64_t kOffsetLanes = 16;
#else
inline constexpr std::int64_t kOffsetLanes = 0;
#endif

// The query rows of one chunk quantized per group: row i's int8 features at q + i·stride, its scales at
// scale + i·groups, and on AVX3_DL its accumulator starts at offset + (i·groups + group)·kOffsetLanes.
struct QueryInt8 {
  std::int8_t* q = nullptr;
  float* scale = nullptr;
  std::int32_t* offset = nullptr;
  std::int64_t stride = 0, groups = 1, g = 0;
};

#if HWY_TARGET == HWY_AVX3_DL
// vpdpbusd: each int32 lane of acc += the products of its 4 unsigned bytes of `u` with the 4 signed bytes of
// `s` (AVX-512 VNNI, no saturation). Written as assembly: Highway 1.0.3's AVX3_DL target attributes enable
// avxvnni but not avx512vnni, which the intrinsic _mm512_dpbusd_epi32 requires.
HWY_INLINE __m512i DotBytes(__m512i acc, __m512i u, __m512i s) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
  return acc;
}

// The lanes of features [e, e0 + g) of a group that one 64-byte step covers.
HWY_INLINE __mmask64 StepMask(std::int64_t e, std::int64_t group_end) {
  const std::int64_t left = group_end - e;
  return left >= 64 ? ~__mmask64{0} : (__mmask64{1} << left) - 1;
}

// The start of row i's accumulators per group: −Σ_steps vpdpbusd(128, q) (lane l: −128 times the sum of the
// q bytes it multiplies).
HWY_INLINE void ComputeQueryOffsets(const QueryInt8& x, std::int64_t i) {
  const __m512i k_offset = _mm512_set1_epi8(static_cast<char>(0x80));
  for (std::int64_t group = 0; group < x.groups; ++group) {
    __m512i sum = _mm512_setzero_si512();
    for (std::int64_t e = group * x.g; e < (group + 1) * x.g; e += 64) {
      const __m512i q = _mm512_maskz_loadu_epi8(StepMask(e, (group + 1) * x.g), x.q + i * x.stride + e);
      sum = DotBytes(sum, k_offset, q);
    }
    _mm512_storeu_si512(x.offset + (i * x.groups + group) * kOffsetLanes, _mm512_sub_epi32(_mm512_setzero_si512(), sum));
  }
}

// Lane r·kC + c: the group's exact dot product of query row0 + r and key c0 + c, as float. As each 64-byte
// line of the K rows is reached, `prefetch_lines(c0, kC, head, byte)` runs (as in ScoreTile).
template <int kR, int kC, class PrefetchLines>
HWY_INLINE VF IntegerDotTile(const QueryInt8& x, std::int64_t row0, const std::int8_t* const* K, std::int64_t c0,
                             std::int64_t head, std::int64_t group, const PrefetchLines& prefetch_lines) {
  constexpr int kN = kR * kC;
  const std::int64_t e0 = group * x.g, group_end = e0 + x.g;
  const __m512i k_offset = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i acc[kN];
  HWY_UNROLL(8) for (int r = 0; r < kR; ++r) {
    const __m512i start = _mm512_loadu_si512(x.offset + ((row0 + r) * x.groups + group) * kOffsetLanes);
    HWY_UNROLL(16) for (int c = 0; c < kC; ++c) acc[r * kC + c] = start;
  }
  for (std::int64_t e = e0; e < group_end; e += 64) {
    const __mmask64 mask = StepMask(e, group_end);
    if (e % 64 == 0) {
      prefetch_lines(c0, kC, head, e);
    }
    __m512i k[kC];  // k + 128 as unsigned bytes; 128 where masked off, against q = 0
    HWY_UNROLL(16) for (int c = 0; c < kC; ++c) {
      k[c] = _mm512_xor_si512(_mm512_maskz_loadu_epi8(mask, K[c0 + c] + head + e), k_offset);
    }
    HWY_UNROLL(8) for (int r = 0; r < kR; ++r) {
      const __m512i q = _mm512_maskz_loadu_epi8(mask, x.q + (row0 + r) * x.stride + e);
      HWY_UNROLL(16) for (int c = 0; c < kC; ++c) acc[r * kC + c] = DotBytes(acc[r * kC + c], k[c], q);
    }
  }
  // Reduced in int32, then converted once: the sums are integers of magnitude ≤ Σ|q·k| ≤ 127·128·576 < 2²⁴,
  // exact in float32.
  using VI = hn::Vec<hn::RebindToSigned<DF>>;
  VI sums[kN];
  HWY_UNROLL(16) for (int i = 0; i < kN; ++i) sums[i] = VI{acc[i]};
  return hn::ConvertTo(DF(), ReduceTransposed<kN>(sums));
}
#else
// Only vpdpbusd's accumulators start at an offset.
HWY_INLINE void ComputeQueryOffsets(const QueryInt8&, std::int64_t) {}
#endif

#if HWY_TARGET != HWY_AVX3_DL && !FLASHATTN_DECODE_SIZELESS_VECTORS
// Lane r·kC + c: the group's exact dot product of query row0 + r and key c0 + c, as float: bytes widened to
// int16, multiplied in pairs of features and added into int32 lanes (vpmaddwd on x86, vmlal on NEON), then the
// features past the last whole vector one by one; prefetches as on AVX3_DL.
template <int kR, int kC, class PrefetchLines>
HWY_INLINE VF IntegerDotTile(const QueryInt8& x, std::int64_t row0, const std::int8_t* const* K, std::int64_t c0,
                             std::int64_t head, std::int64_t group, const PrefetchLines& prefetch_lines) {
  constexpr int kN = kR * kC;
  const DF df;
  const hn::RebindToSigned<DF> di;
#if HWY_TARGET == HWY_SCALAR
  const hn::Rebind<std::int16_t, decltype(di)> d16;  // one lane: a single product per step
#else
  const hn::Repartition<std::int16_t, decltype(di)> d16;  // two features per int32 lane
#endif
  const hn::Rebind<std::int8_t, decltype(d16)> d8;
  const std::int64_t step = static_cast<std::int64_t>(hn::Lanes(d16));
  const std::int64_t e0 = group * x.g, group_end = e0 + x.g;
  // Where a target splits the pairs' sums over two accumulators (NEON), `odd` holds the second; elsewhere it
  // stays 0 and the final addition folds away.
  hn::Vec<decltype(di)> acc[kN], odd[kN];
  HWY_UNROLL(16) for (int i = 0; i < kN; ++i) acc[i] = odd[i] = hn::Zero(di);
  std::int64_t e = e0;
  for (; e + step <= group_end; e += step) {
    if (e % 64 == 0) {
      prefetch_lines(c0, kC, head, e);
    }
    hn::Vec<decltype(d16)> k[kC];
    HWY_UNROLL(16) for (int c = 0; c < kC; ++c) k[c] = hn::PromoteTo(d16, hn::LoadU(d8, K[c0 + c] + head + e));
    HWY_UNROLL(8) for (int r = 0; r < kR; ++r) {
      const auto q = hn::PromoteTo(d16, hn::LoadU(d8, x.q + (row0 + r) * x.stride + e));
      HWY_UNROLL(16) for (int c = 0; c < kC; ++c) {
        acc[r * kC + c] = hn::ReorderWidenMulAccumulate(di, q, k[c], acc[r * kC + c], odd[r * kC + c]);
      }
    }
  }
  HWY_UNROLL(16) for (int i = 0; i < kN; ++i) acc[i] = hn::Add(acc[i], odd[i]);
  if (e == group_end) return hn::ConvertTo(df, ReduceTransposed<kN>(acc));
  alignas(64) std::int32_t dots[kN];
  hn::Store(ReduceTransposed<kN>(acc), di, dots);
  for (; e < group_end; ++e) {
    for (int r = 0; r < kR; ++r)
      for (int c = 0; c < kC; ++c) dots[r * kC + c] += x.q[(row0 + r) * x.stride + e] * K[c0 + c][head + e];
  }
  return hn::ConvertTo(df, hn::Load(di, dots));  // exact as on AVX3_DL: integers of magnitude < 2²⁴
}
#endif

#if FLASHATTN_DECODE_SIZELESS_VECTORS
// Σ_{e < n} q[e]·k[e], exact in int32 (|Σ| ≤ 127·128·576 < 2³¹).
HWY_INLINE std::int32_t GroupDot(const std::int8_t* q, const std::int8_t* k, std::int64_t n) {
#if HWY_TARGET & (HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128)
  // SDOT: each int32 lane adds the products of its 4 signed bytes of q and k
  svint32_t acc = svdup_n_s32(0);
  for (std::int64_t e = 0; e < n; e += static_cast<std::int64_t>(svcntb())) {
    const svbool_t active = svwhilelt_b8_s64(e, n);
    acc = svdot_s32(acc, svld1_s8(active, q + e), svld1_s8(active, k + e));
  }
  return static_cast<std::int32_t>(svaddv_s32(svptrue_b32(), acc));
#else
  std::int32_t dot = 0;
  for (std::int64_t e = 0; e < n; ++e) dot += q[e] * k[e];
  return dot;
#endif
}
#endif

// Quantizes the H·R float rows Q (ldq apart; s·q, already pre-scaled) into x: per group of g features,
// scale = max|q| / 127 and q / scale rounded to nearest even (QuantizeRow, as a per-token cache row). A row
// group holding an inf or a NaN gets a NaN scale, so that its scores are NaN as they would be in float32.
inline void QuantizeQueryRows(const float* Q, std::int64_t rows, std::int64_t ldq, std::int64_t d,
                                  const QueryInt8& x) {
  for (std::int64_t i = 0; i < rows; ++i) {
    const float* row = Q + i * ldq;
    std::int8_t* q = x.q + i * x.stride;
    QuantizeRow(row, d, CacheElement::kInt8, ScaleGranularity::kPerToken, x.g, x.scale + i * x.groups,
                reinterpret_cast<std::uint8_t*>(q));
    for (std::int64_t e = 0; e < d; ++e) {
      if (!std::isfinite(row[e])) x.scale[i * x.groups + e / x.g] = std::numeric_limits<float>::quiet_NaN();
    }
    std::fill(q + d, q + x.stride, std::int8_t{0});
    ComputeQueryOffsets(x, i);
  }
}

// S_h = the scores of R rows × `cols` keys for each of H heads h (laid out as ScoreBlock's: rows of head h
// from S + h·R·kBc, kBc apart), key c's row of head h at K[c] + h·head_stride and its scales at
// k_scale[c] + h·scale_head_stride, one per group. `prefetch_lines(c0, keys, head, byte)` runs once for each
// 64-byte line of the keys' rows, as the lines are reached, as in ScoreBlock. With one group the tiles store the
// dot products and one pass per head scales them; with several, each group's term is added as it is formed.
template <class PrefetchLines>
void IntegerScoreBlock(const QueryInt8& x, std::int64_t H, std::int64_t R, const std::int8_t* const* K,
                       std::int64_t head_stride, const float* const* k_scale, std::int64_t scale_head_stride,
                       [[maybe_unused]] std::int64_t d, std::int64_t cols, float* S,
                       const PrefetchLines& prefetch_lines) {
  // S[row][c] = dot, or += (dot · q_scale) · k_scale for one of several groups, in this order on every target
  const auto store = [&](std::int64_t row, std::int64_t c, std::int64_t h, std::int64_t group, float dot) {
    float& s = S[row * kBc + c];
    const float term = dot * x.scale[row * x.groups + group] * k_scale[c][h * scale_head_stride + group];
    s = group == 0 ? term : s + term;
  };
  // One group: S[row][c] = (dot · q_scale[row]) · k_scale[c] over head h's rows
  const auto scale_head = [&](std::int64_t h) {
    if (x.groups != 1) return;
    alignas(64) float k_scale_h[kBc];
    for (std::int64_t c = 0; c < kBc; ++c) k_scale_h[c] = c < cols ? k_scale[c][h * scale_head_stride] : 0.0f;
    ScaleScores(S + h * R * kBc, R, x.scale + h * R, k_scale_h);
  };
#if FLASHATTN_DECODE_SIZELESS_VECTORS
  for (std::int64_t h = 0; h < H; ++h) {
    for (std::int64_t c = 0; c < cols; ++c) {
      for (std::int64_t byte = 0; byte < d; byte += 64) prefetch_lines(c, 1, h * head_stride, byte);
    }
    for (std::int64_t row = h * R; row < (h + 1) * R; ++row)
      for (std::int64_t c = 0; c < cols; ++c)
        for (std::int64_t group = 0; group < x.groups; ++group) {
          const std::int64_t e0 = group * x.g;
          const std::int32_t dot = GroupDot(x.q + row * x.stride + e0, K[c] + h * head_stride + e0, x.g);
          if (x.groups == 1) S[row * kBc + c] = static_cast<float>(dot);
          else store(row, c, h, group, static_cast<float>(dot));
        }
  }
#else
  const auto no_prefetch = [](std::int64_t, std::int64_t, std::int64_t, std::int64_t) {};
  // keys past `cols` computed, not stored; the first tile of rows carries the prefetches
  ForEachScoreTile(H, R, cols, [&](auto kR, auto kC, std::int64_t h, std::int64_t row0, std::int64_t c0,
                                   bool first) FLASHATTN_INLINE_LAMBDA {
    constexpr int kRows = decltype(kR)::value, kCols = decltype(kC)::value;
    const auto dot_tile = [&](std::int64_t group) FLASHATTN_INLINE_LAMBDA {
      if (first) return IntegerDotTile<kRows, kCols>(x, row0, K, c0, h * head_stride, group, prefetch_lines);
      return IntegerDotTile<kRows, kCols>(x, row0, K, c0, h * head_stride, group, no_prefetch);
    };
    if (x.groups == 1) {
      StoreDotTile<kRows, kCols>(dot_tile(0), c0, cols, S + row0 * kBc);
      return;
    }
    for (std::int64_t group = 0; group < x.groups; ++group) {
      alignas(64) float dots[kLanes];
      hn::Store(dot_tile(group), DF(), dots);
      for (int i = 0; i < kRows; ++i)
        for (std::int64_t c = c0; c < std::min(cols, c0 + kCols); ++c) {
          store(row0 + i, c, h, group, dots[i * kCols + (c - c0)]);
        }
    }
  });
#endif
  for (std::int64_t h = 0; h < H; ++h) scale_head(h);
}


}  // namespace flashattn::HWY_NAMESPACE::decode_kernel
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_DECODE_INTEGER_SCORES_INL_H_
