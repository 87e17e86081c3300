// The scores of an int8 cache from integer dot products (DecodeParams::quantize_query_int8), per Highway
// target; include after hwy/highway.h. Each query row is quantized to int8 per group of g features (the
// cache's scale groups) with a scale of its own, and
//   S[r][c] = Σ_groups (dot_group(q_r, k_c) · q_scale[r][group]) · k_scale[c][group]
// where dot_group is the exact int32 dot product of the group's int8 features. Every target computes the
// same exact integers and then the same float operations, so the scores are identical across targets.
// AVX3_DL (AVX-512 VNNI) forms them with vpdpbusd, which multiplies unsigned by signed bytes: k + 128 (k with
// its top bit flipped) times q, its accumulators started at −128·Σq per lane (InterleaveQueryRows), so that
// they hold Σ q·k; one instruction serves four query rows against one key (BroadcastDots). Arm's SVE targets
// use SDOT (signed by signed bytes), one dot product at a time; the other targets widen to int16 and multiply
// pairs of features into int32 lanes (vpmaddwd, vmlal).
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
#include <type_traits>

#include "common/quantize.h"
#include "decode/attend_tiles-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE::decode_kernel {

// Bytes of a quantized query row: whole 64-byte vectors, zero beyond d.
inline std::int64_t QueryInt8Stride(std::int64_t d) { return RoundUp(d, std::int64_t{64}); }

#if HWY_TARGET == HWY_AVX3_DL
// int32 lanes of one vpdpbusd accumulator: its start −128·Σq per lane is kept per (block of rows, group), as
// many as there are (row, group) pairs at most.
inline constexpr std::int64_t kOffsetLanes = 16;
#else
inline constexpr std::int64_t kOffsetLanes = 0;
#endif

// The query rows of one chunk quantized per group: row i's int8 features at q + i·stride, its scales at
// scale + i·groups. On AVX3_DL the rows are also laid out in blocks of four rows (`blocks`, see
// InterleaveQueryRows), with the accumulator starts of each block of rows and group at `offset`.
struct QueryInt8 {
  std::int8_t* q = nullptr;
  float* scale = nullptr;
  std::int8_t* blocks = nullptr;
  std::int32_t* offset = nullptr;
  std::int64_t stride = 0, groups = 1, g = 0;
  std::int64_t row_groups = 0, steps = 0;  // blocks of four rows per head, 16-feature steps per scale group
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

// The rows of a head go in blocks of four, each scale group in steps of 16 features: the 64-byte vector of
// block i, group and step s holds in its 128-bit block b the features [16s, 16s + 16) of the group for row
// 4i + b, zero past the group's end and for rows past R.
inline constexpr std::int64_t kBlockRows = 4;
inline constexpr std::int64_t kStepFeatures = 16;

inline std::int64_t RowGroups(std::int64_t R) { return (R + kBlockRows - 1) / kBlockRows; }
inline std::int64_t StepsPerGroup(std::int64_t g) { return (g + kStepFeatures - 1) / kStepFeatures; }

HWY_INLINE std::int64_t BlockIndex(const QueryInt8& x, std::int64_t h, std::int64_t i, std::int64_t group) {
  return (h * x.row_groups + i) * x.groups + group;
}
HWY_INLINE std::int8_t* QueryBlock(const QueryInt8& x, std::int64_t h, std::int64_t i, std::int64_t group,
                                   std::int64_t s) {
  return x.blocks + (BlockIndex(x, h, i, group) * x.steps + s) * 64;
}

// Lays out the quantized rows x.q of H heads × R rows in blocks (QueryBlock), and the start of each block's
// accumulators per group: −Σ_steps vpdpbusd(128, block) (lane j of block b: −128 times the sum of the q bytes
// it multiplies).
inline void InterleaveQueryRows(const QueryInt8& x, std::int64_t H, std::int64_t R) {
  const __m512i k_offset = _mm512_set1_epi8(static_cast<char>(0x80));
  for (std::int64_t h = 0; h < H; ++h)
    for (std::int64_t i = 0; i < x.row_groups; ++i)
      for (std::int64_t group = 0; group < x.groups; ++group) {
        __m512i sum = _mm512_setzero_si512();
        for (std::int64_t s = 0; s < x.steps; ++s) {
          const std::int64_t e = group * x.g + s * kStepFeatures;
          const std::int64_t n = std::clamp<std::int64_t>((group + 1) * x.g - e, 0, kStepFeatures);
          std::int8_t* block = QueryBlock(x, h, i, group, s);
          for (std::int64_t b = 0; b < kBlockRows; ++b) {
            const std::int64_t r = i * kBlockRows + b;
            std::int8_t* features = block + b * kStepFeatures;
            std::fill(features, features + kStepFeatures, std::int8_t{0});
            if (r < R) std::copy_n(x.q + (h * R + r) * x.stride + e, n, features);
          }
          sum = DotBytes(sum, k_offset, _mm512_loadu_si512(block));
        }
        const __m512i start = _mm512_sub_epi32(_mm512_setzero_si512(), sum);
        _mm512_storeu_si512(x.offset + BlockIndex(x, h, i, group) * kOffsetLanes, start);
      }
}

// The group's exact dot products of the rows of kBlocks blocks of rows i, i + 1 … of head h with the kKeys keys
// c0 …: lane j of block b of dots[n][k] is that of row 4(i + n) + b and key c0 + 4k + j. Each key's 16
// features of a step are broadcast to the four blocks (as k + 128) against each block of rows, so that one
// vpdpbusd serves four rows and the lanes of one (row, key) pair lie within one 128-bit block: a transposing
// sum of four lanes (SumsWithinBlocks) per dot product instead of sixteen. The blocks of rows share each key's
// load and flip. `prefetch_lines(c0, kKeys, head, byte)` runs as each 64-byte line of the keys' rows is
// reached, as in ScoreTile.
template <int kKeys, int kBlocks, class PrefetchLines>
HWY_INLINE void BroadcastDots(const QueryInt8& x, std::int64_t h, std::int64_t i, const std::int8_t* const* K,
                              std::int64_t c0, std::int64_t head, std::int64_t group,
                              const PrefetchLines& prefetch_lines, VF (&dots)[kBlocks][kKeys / 4]) {
  const __m512i k_offset = _mm512_set1_epi8(static_cast<char>(0x80));
  const std::int64_t e0 = group * x.g, group_end = e0 + x.g;
  __m512i acc[kBlocks][kKeys];
  HWY_UNROLL(2) for (int n = 0; n < kBlocks; ++n) {
    const __m512i start = _mm512_loadu_si512(x.offset + BlockIndex(x, h, i + n, group) * kOffsetLanes);
    HWY_UNROLL(16) for (int c = 0; c < kKeys; ++c) acc[n][c] = start;
  }
  // One step s: the features [e, e + 16) of each key, broadcast to every block by load_key(row + e), as k + 128
  const auto step = [&](std::int64_t s, const auto& load_key) FLASHATTN_INLINE_LAMBDA {
    const std::int64_t e = e0 + s * kStepFeatures;
    __m512i q[kBlocks];
    HWY_UNROLL(2) for (int n = 0; n < kBlocks; ++n) q[n] = _mm512_loadu_si512(QueryBlock(x, h, i + n, group, s));
    HWY_UNROLL(16) for (int c = 0; c < kKeys; ++c) {
      const __m512i key = _mm512_xor_si512(load_key(K[c0 + c] + head + e), k_offset);
      HWY_UNROLL(2) for (int n = 0; n < kBlocks; ++n) acc[n][c] = DotBytes(acc[n][c], key, q[n]);
    }
  };
  const auto broadcast = [](const std::int8_t* p) FLASHATTN_INLINE_LAMBDA {
    return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  };
  // The request of a line that starts within step s, if one does
  const auto request_line_in = [&](std::int64_t s) FLASHATTN_INLINE_LAMBDA {
    const std::int64_t e = e0 + s * kStepFeatures, line = RoundUp(e, std::int64_t{64});
    if (line < std::min(e + kStepFeatures, group_end)) prefetch_lines(c0, kKeys, head, line);
  };
  const std::int64_t whole_steps = x.g / kStepFeatures;
  std::int64_t s = 0;
  if (e0 % 64 == 0) {  // whole lines: each line's request, then its four steps
    for (; s + 4 <= whole_steps; s += 4) {
      prefetch_lines(c0, kKeys, head, e0 + s * kStepFeatures);
      HWY_UNROLL(4) for (int t = 0; t < 4; ++t) step(s + t, broadcast);
    }
  }
  for (; s < whole_steps; ++s) {
    request_line_in(s);
    step(s, broadcast);
  }
  if (whole_steps < x.steps) {  // the group's last features, those past its end read as 0 (against q = 0)
    const __mmask16 mask = (__mmask16{1} << (x.g % kStepFeatures)) - 1;
    request_line_in(whole_steps);
    step(whole_steps, [mask](const std::int8_t* p) { return _mm512_broadcast_i32x4(_mm_maskz_loadu_epi8(mask, p)); });
  }
  // Reduced in int32, then converted once: the sums are integers of magnitude ≤ Σ|q·k| ≤ 127·128·576 < 2²⁴,
  // exact in float32.
  using VI = hn::Vec<hn::RebindToSigned<DF>>;
  HWY_UNROLL(2) for (int n = 0; n < kBlocks; ++n) {
    HWY_UNROLL(4) for (int k = 0; k < kKeys / 4; ++k) {
      const __m512i* a = acc[n] + 4 * k;
      dots[n][k] = hn::ConvertTo(DF(), SumsWithinBlocks(VI{a[0]}, VI{a[1]}, VI{a[2]}, VI{a[3]}));
    }
  }
}

// S[row0 + b][c0 + 4k + j] = lane j of block b of dots[k], for the block's `rows` rows (S rows kBc apart).
template <int kKeys>
HWY_INLINE void StoreBlockDots(const VF (&dots)[kKeys / 4], std::int64_t rows, std::int64_t c0, float* S) {
  HWY_UNROLL(4) for (int k = 0; k < kKeys / 4; ++k) {
    const __m512 v = dots[k].raw;
    float* at = S + c0 + 4 * k;
    _mm_storeu_ps(at, _mm512_castps512_ps128(v));
    if (rows > 1) _mm_storeu_ps(at + kBc, _mm512_extractf32x4_ps(v, 1));
    if (rows > 2) _mm_storeu_ps(at + 2 * kBc, _mm512_extractf32x4_ps(v, 2));
    if (rows > 3) _mm_storeu_ps(at + 3 * kBc, _mm512_extractf32x4_ps(v, 3));
  }
}

// With several scale groups: S[row0 + b][c0 + 4k + j] = term for the first group, else S += term, where
// term = (lane j of block b of dots[k] · q_scale[b·q_stride]) · k_scale[c0 + 4k + j][at], for the block's `rows`
// rows: the scalar steps of IntegerScoreBlock's `store`, four keys at a time.
template <int kKeys>
HWY_INLINE void AddGroupTerms(const VF (&dots)[kKeys / 4], std::int64_t rows, const float* q_scale,
                              std::int64_t q_stride, const float* const* k_scale, std::int64_t at, std::int64_t c0,
                              bool first_group, float* S) {
  // row b's scale in the lanes of block b (0 for rows past `rows`)
  const auto row_scale = [&](std::int64_t b) { return b < rows ? q_scale[b * q_stride] : 0.0f; };
  const __m128 four_rows = _mm_setr_ps(row_scale(0), row_scale(1), row_scale(2), row_scale(3));
  const __m512i block_of_lane = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const __m512 q = _mm512_permutexvar_ps(block_of_lane, _mm512_castps128_ps512(four_rows));
  HWY_UNROLL(4) for (int k = 0; k < kKeys / 4; ++k) {
    const float* const* keys = k_scale + c0 + 4 * k;
    const __m128 four = _mm_setr_ps(keys[0][at], keys[1][at], keys[2][at], keys[3][at]);
    const __m512 key_scales = _mm512_broadcast_f32x4(four);
    const __m512 term = _mm512_mul_ps(_mm512_mul_ps(dots[k].raw, q), key_scales);
    const auto add = [&](std::int64_t b, __m128 block) {
      float* s = S + b * kBc + c0 + 4 * k;
      _mm_storeu_ps(s, first_group ? block : _mm_add_ps(_mm_loadu_ps(s), block));
    };
    add(0, _mm512_castps512_ps128(term));
    if (rows > 1) add(1, _mm512_extractf32x4_ps(term, 1));
    if (rows > 2) add(2, _mm512_extractf32x4_ps(term, 2));
    if (rows > 3) add(3, _mm512_extractf32x4_ps(term, 3));
  }
}
#endif

#if HWY_TARGET != HWY_AVX3_DL && !FLASHATTN_DECODE_SIZELESS_VECTORS
// Lane r·kC + c: the group's exact dot product of query row0 + r and key c0 + c, as float: bytes widened to
// int16, multiplied in pairs of features and added into int32 lanes (vpmaddwd on x86, vmlal on NEON), then the
// features past the last whole vector one by one. As each 64-byte line of the K rows is reached,
// `prefetch_lines(c0, kC, head, byte)` runs (as in ScoreTile).
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
  return hn::ConvertTo(df, hn::Load(di, dots));  // exact: integers of magnitude < 2²⁴
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
// scale = max|q| / 127 and q / scale rounded to nearest even, the bytes and scales QuantizeRow gives a per-token
// cache row (the same divisions and roundings), a vector at a time: element by element they took a quarter of
// the time of a chunk of 512 keys (8 K/V heads of 4 rows). A group holding an inf or a NaN gets a NaN scale, so
// that its scores are NaN as they would be in float32.
inline void QuantizeQueryRows(const float* Q, std::int64_t H, std::int64_t R, std::int64_t ldq, std::int64_t d,
                              QueryInt8& x) {
  const DF df;
  const hn::Rebind<std::int8_t, DF> d8;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df)), g = x.g;
  const VF limit = hn::Set(df, 127.0f);
  for (std::int64_t i = 0; i < H * R; ++i) {
    const float* row = Q + i * ldq;
    std::int8_t* q = x.q + i * x.stride;
    for (std::int64_t e0 = 0; e0 < d; e0 += g) {
      const std::int64_t end = e0 + g, vectors_end = e0 + g / N * N;
      VF max_abs = hn::Zero(df);
      auto finite = hn::IsFinite(max_abs);
      for (std::int64_t e = e0; e < vectors_end; e += N) {
        const VF v = hn::LoadU(df, row + e);
        max_abs = hn::Max(max_abs, hn::Abs(v));
        finite = hn::And(finite, hn::IsFinite(v));
      }
      float group_max = hn::GetLane(hn::MaxOfLanes(df, max_abs));
      bool all_finite = hn::AllTrue(df, finite);
      for (std::int64_t e = vectors_end; e < end; ++e) {
        group_max = std::max(group_max, std::fabs(row[e]));
        all_finite = all_finite && std::isfinite(row[e]);
      }
      const float scale = group_max / QuantMax(CacheElement::kInt8);
      x.scale[i * x.groups + e0 / g] = all_finite ? scale : std::numeric_limits<float>::quiet_NaN();
      // EncodeQuantized: 0 for an all-zero group, else q / scale within ±127, to nearest even
      const VF divisor = hn::Set(df, scale);
      for (std::int64_t e = e0; e < vectors_end; e += N) {
        const VF v = scale == 0.0f ? hn::Zero(df) : hn::Div(hn::LoadU(df, row + e), divisor);
        hn::StoreU(hn::DemoteTo(d8, hn::NearestInt(hn::Min(hn::Max(v, hn::Neg(limit)), limit))), d8, q + e);
      }
      for (std::int64_t e = vectors_end; e < end; ++e) {
        q[e] = static_cast<std::int8_t>(EncodeQuantized(row[e], scale, CacheElement::kInt8));
      }
    }
    std::fill(q + d, q + x.stride, std::int8_t{0});
  }
#if HWY_TARGET == HWY_AVX3_DL
  x.row_groups = RowGroups(R);
  x.steps = StepsPerGroup(x.g);
  InterleaveQueryRows(x, H, R);
#endif
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
  // (AVX3_DL's tiles add the terms themselves)
  [[maybe_unused]] const auto store = [&](std::int64_t row, std::int64_t c, std::int64_t h, std::int64_t group,
                                          float dot) {
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
#elif HWY_TARGET == HWY_AVX3_DL
  constexpr int kKeys = 8;
  static_assert(kBc % kKeys == 0, "whole groups of keys in a block");
  // As ForEachScoreTile walks: kLanes keys for every head, in groups of kKeys keys per block of rows. Keys past
  // `cols` are computed (their rows repeat a real one) and their scores stored too, into the block's columns
  // that the softmax sets to −∞. The first block of rows carries the prefetches.
  // Blocks i … i + kBlocks − 1 of head h's rows against the keys [g0, g0 + kLanes): their dots stored or added
  const auto row_blocks = [&](auto kN, std::int64_t g0, std::int64_t h, std::int64_t i) FLASHATTN_INLINE_LAMBDA {
    constexpr int kBlocks = decltype(kN)::value;
    for (std::int64_t c0 = g0; c0 < std::min(cols, g0 + kLanes); c0 += kKeys)
      for (std::int64_t group = 0; group < x.groups; ++group) {
        VF dots[kBlocks][kKeys / 4];
        if (i == 0) BroadcastDots<kKeys, kBlocks>(x, h, i, K, c0, h * head_stride, group, prefetch_lines, dots);
        else BroadcastDots<kKeys, kBlocks>(x, h, i, K, c0, h * head_stride, group, kNoLineRequests, dots);
        for (int n = 0; n < kBlocks; ++n) {
          const std::int64_t first = (i + n) * kBlockRows, row0 = h * R + first;
          const std::int64_t rows = std::min(kBlockRows, R - first);
          if (x.groups == 1) {
            StoreBlockDots<kKeys>(dots[n], rows, c0, S + row0 * kBc);
            continue;
          }
          AddGroupTerms<kKeys>(dots[n], rows, x.scale + row0 * x.groups + group, x.groups, k_scale,
                               h * scale_head_stride + group, c0, group == 0, S + row0 * kBc);
        }
      }
  };
  // Pairs of blocks, then a last single one. The choice stays outside the key loops: made per group of keys, it
  // cost the one-block loop the registers of its key rows (7% slower scores at four rows).
  for (std::int64_t g0 = 0; g0 < cols; g0 += kLanes)
    for (std::int64_t h = 0; h < H; ++h) {
      std::int64_t i = 0;
      for (; i + 2 <= x.row_groups; i += 2) row_blocks(std::integral_constant<int, 2>(), g0, h, i);
      if (i < x.row_groups) row_blocks(std::integral_constant<int, 1>(), g0, h, i);
    }
#else
  // keys past `cols` computed, not stored; the first tile of rows carries the prefetches
  ForEachScoreTile(H, R, cols, [&](auto kR, auto kC, std::int64_t h, std::int64_t row0, std::int64_t c0,
                                   bool first) FLASHATTN_INLINE_LAMBDA {
    constexpr int kRows = decltype(kR)::value, kCols = decltype(kC)::value;
    const auto dot_tile = [&](std::int64_t group) FLASHATTN_INLINE_LAMBDA {
      if (first) return IntegerDotTile<kRows, kCols>(x, row0, K, c0, h * head_stride, group, prefetch_lines);
      return IntegerDotTile<kRows, kCols>(x, row0, K, c0, h * head_stride, group, kNoLineRequests);
    };
    // one call for one group or several, so that each of the tile's two instances is inlined once
    for (std::int64_t group = 0; group < x.groups; ++group) {
      const VF dots = dot_tile(group);
      if (x.groups == 1) {
        StoreDotTile<kRows, kCols>(dots, c0, cols, S + row0 * kBc);
        return;
      }
      alignas(64) float lanes[kLanes];
      hn::Store(dots, DF(), lanes);
      for (int i = 0; i < kRows; ++i)
        for (std::int64_t c = c0; c < std::min(cols, c0 + kCols); ++c) {
          store(row0 + i, c, h, group, lanes[i * kCols + (c - c0)]);
        }
    }
  });
#endif
  for (std::int64_t h = 0; h < H; ++h) scale_head(h);
}

}  // namespace flashattn::HWY_NAMESPACE::decode_kernel
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_DECODE_INTEGER_SCORES_INL_H_
