// The register-tiled pieces the decode kernel's key and value paths are made of (key_paths-inl.h,
// value_paths-inl.h), per Highway target; include after hwy/highway.h:
//   ScoreBlock:      S = Q K_jᵀ for R rows × a block of keys, in tiles of rows × keys whose dot products
//                    are reduced together by a transposing shuffle tree (ReduceTransposed)
//   AccumulateBlock: Õ = diag(α) Õ + P̃ V_j, tiles of rows × two vectors of features
// K and V rows are reached through one pointer per key, into the cache (float32, or float16/bfloat16
// widened as loaded) or into a widened float32 block.
#if defined(FLASHATTN_DECODE_ATTEND_TILES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_DECODE_ATTEND_TILES_INL_H_
#undef FLASHATTN_DECODE_ATTEND_TILES_INL_H_
#else
#define FLASHATTN_DECODE_ATTEND_TILES_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "decode/attend.h"
#include "hwy/highway.h"
#include "simd/convert-inl.h"
#include "simd/register_tiles-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE::decode_kernel {
using flashattn::decode_kernel::kDecodeBc;

inline constexpr std::int64_t kBc = kDecodeBc;


// Lanes of a float vector when the target fixes it at compile time and its vectors can form arrays (every
// x86 and NEON target), else 0: scalable vectors, and Arm SVE's at every length (SVE_256 and SVE2_128 fix
// it), whose sizeless types cannot be array elements. Those targets take ScoreBlock's path of one
// horizontal sum per dot product and none of the tiles below that hold arrays of vectors.
#undef FLASHATTN_DECODE_SIZELESS_VECTORS  // set again for each target
#if HWY_HAVE_SCALABLE || (HWY_TARGET & (HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128))
#define FLASHATTN_DECODE_SIZELESS_VECTORS 1
inline constexpr int kLanes = 0;
#else
#define FLASHATTN_DECODE_SIZELESS_VECTORS 0
inline constexpr int kLanes = static_cast<int>(hn::MaxLanes(DF()));
#endif

#if FLASHATTN_DECODE_SIZELESS_VECTORS
// No ReduceTransposed: sizeless vectors are summed one dot product at a time (ScoreBlock).
#elif HWY_TARGET == HWY_SCALAR
template <int kN, class V>
HWY_INLINE V ReduceTransposed(const V* acc) {
  static_assert(kN == 1);
  return acc[0];
}
#else
// For kLanes = 4·2^k: one vector whose lane i is the sum of the lanes of acc[i], for i < kLanes, of 32-bit
// lanes (float, or int32 for exact integer sums). First within each 128-bit block (four vectors at a time, by
// 32- then 64-bit interleaves), then across blocks (halves, then adjacent blocks); 3 operations per sum
// instead of a horizontal sum each.
template <class V>
HWY_INLINE V SumsWithinBlocks(V a, V b, V c, V d) {
  const hn::DFromV<V> dv;
  const hn::Repartition<std::uint64_t, decltype(dv)> du64;
  const V ab = hn::Add(hn::InterleaveLower(dv, a, b), hn::InterleaveUpper(dv, a, b));  // a0+a2 b0+b2 a1+a3 b1+b3
  const V cd = hn::Add(hn::InterleaveLower(dv, c, d), hn::InterleaveUpper(dv, c, d));
  const auto ab64 = hn::BitCast(du64, ab), cd64 = hn::BitCast(du64, cd);
  return hn::Add(hn::BitCast(dv, hn::InterleaveLower(du64, ab64, cd64)),
                 hn::BitCast(dv, hn::InterleaveUpper(du64, ab64, cd64)));  // Σa Σb Σc Σd per block
}

template <int kN, class V>
HWY_INLINE V ReduceTransposed(const V* acc) {
  const hn::DFromV<V> df;
  static_assert(sizeof(hn::TFromV<V>) == 4, "32-bit lanes, kLanes per vector");
  if constexpr (kN == 4) {
    return SumsWithinBlocks(acc[0], acc[1], acc[2], acc[3]);
  } else if constexpr (kN == 8) {  // blocks [W0 | W1] → lanes 0-3 from acc 0-3, 4-7 from acc 4-7
    const V w0 = SumsWithinBlocks(acc[0], acc[1], acc[2], acc[3]);
    const V w1 = SumsWithinBlocks(acc[4], acc[5], acc[6], acc[7]);
    return hn::Add(hn::ConcatLowerLower(df, w1, w0), hn::ConcatUpperUpper(df, w1, w0));
  } else {
    static_assert(kN == 16, "fixed-width float vectors have 4, 8 or 16 lanes beyond the scalar target");
    // s01 = [x0 x1 y0 y1] holds ΣW_a = x0 + x1, ΣW_b = y0 + y1 by blocks; s23 = [z0 z1 w0 w1] likewise. W_b
    // is built from acc 8-11 and W_c from 4-7 so that the blocks of the result come out in order.
    const V wa = SumsWithinBlocks(acc[0], acc[1], acc[2], acc[3]);
    const V wb = SumsWithinBlocks(acc[8], acc[9], acc[10], acc[11]);
    const V wc = SumsWithinBlocks(acc[4], acc[5], acc[6], acc[7]);
    const V wd = SumsWithinBlocks(acc[12], acc[13], acc[14], acc[15]);
    const V s01 = hn::Add(hn::ConcatLowerLower(df, wb, wa), hn::ConcatUpperUpper(df, wb, wa));
    const V s23 = hn::Add(hn::ConcatLowerLower(df, wd, wc), hn::ConcatUpperUpper(df, wd, wc));
    const V firsts = hn::OddEvenBlocks(hn::SwapAdjacentBlocks(s23), s01);   // x0 z0 y0 w0
    const V seconds = hn::OddEvenBlocks(s23, hn::SwapAdjacentBlocks(s01));  // x1 z1 y1 w1
    return hn::Add(firsts, seconds);
  }
}
#endif  // FLASHATTN_DECODE_SIZELESS_VECTORS

// How the tiles scale the quantized rows they read straight. RowScales: not at all (a row's one scale acts on
// its scores or weights outside the tiles). GroupScales<kGroupsPerVector>: each widened vector times its scale
// groups' scales as it is loaded, for groups of 2^log2_g features that hold whole vectors (1) or half a vector
// (2: the lower lanes take one group's scale, the upper lanes the next's); key c's scales for the head are at
// base + offset[c] + head, one per group. The products are those of rows dequantized into float32 blocks first.
struct RowScales {
  RowScales ForHead(std::int64_t) const { return *this; }
  RowScales FromKey(std::int64_t) const { return *this; }
};
template <int kGroupsPerVector>
struct GroupScales {
  static_assert(kGroupsPerVector == 1 || kGroupsPerVector == 2);
  const float* base = nullptr;
  const std::int64_t* offset = nullptr;
  std::int64_t head_stride = 0, head = 0;
  int log2_g = 0;
  GroupScales ForHead(std::int64_t h) const {
    GroupScales s = *this;
    s.head = h * head_stride;
    return s;
  }
  GroupScales FromKey(std::int64_t c0) const {  // for a tile handed the rows from key c0 on
    GroupScales s = *this;
    s.offset += c0;
    return s;
  }
};

// Features [e, e + Lanes) of `row` (key c's), widened, and scaled as `scales` says (with what LoadF32 leaves out
// of an FP8 value, kWideningFactor, as the widened rows have it).
template <typename T>
HWY_INLINE VF LoadScaled(DF df, const T* row, std::int64_t e, std::int64_t, const RowScales&) {
  return LoadF32(df, row + e);
}
template <typename T, int kGroupsPerVector>
HWY_INLINE VF LoadScaled(DF df, const T* row, std::int64_t e, std::int64_t c,
                         const GroupScales<kGroupsPerVector>& scales) {
  const float* scale = scales.base + scales.offset[c] + scales.head + (e >> scales.log2_g);
  const VF lower = hn::Set(df, scale[0] * kWideningFactor<T>);
  if constexpr (kGroupsPerVector == 1) {
    return hn::Mul(lower, LoadF32(df, row + e));
  } else {
    const VF upper = hn::Set(df, scale[1] * kWideningFactor<T>);
    const VF scale_of_lane = hn::IfThenElse(hn::FirstN(df, hn::Lanes(df) / 2), lower, upper);
    return hn::Mul(scale_of_lane, LoadF32(df, row + e));
  }
}

// The request callbacks for the tiles and passes that carry no prefetches: (c0, keys, head, byte) for the lines
// of a score tile, (c) for a key of the accumulation, (c0, keys) for the keys of an accumulation pass.
inline constexpr auto kNoLineRequests = [](std::int64_t, std::int64_t, std::int64_t, std::int64_t) {};
inline constexpr auto kNoKeyRequests = [](std::int64_t) {};
inline constexpr auto kNoPassRequests = [](std::int64_t, std::int64_t) {};

#if !FLASHATTN_DECODE_SIZELESS_VECTORS
// S[r][c0 + c] = lane r·kC + c of `dots` for a tile of kR rows × kC keys (rows kBc apart), keys past `cols`
// left out.
template <int kR, int kC>
HWY_INLINE void StoreDotTile(VF dots, std::int64_t c0, std::int64_t cols, float* HWY_RESTRICT S) {
  alignas(64) float lanes[kR * kC];
  hn::Store(dots, DF(), lanes);
  if (c0 + kC <= cols) {  // a whole tile: one copy of kC floats per row
    HWY_UNROLL(8) for (int r = 0; r < kR; ++r) std::memcpy(S + r * kBc + c0, lanes + r * kC, kC * sizeof(float));
  } else {
    for (int r = 0; r < kR; ++r)
      for (std::int64_t c = 0; c < cols - c0; ++c) S[r * kBc + c0 + c] = lanes[r * kC + c];
  }
}
#endif

#if FLASHATTN_DECODE_SIZELESS_VECTORS
// S_h = Q_h K_{j,h}ᵀ for each of H heads h (R rows per head, laid out as the fixed-size ScoreBlock below
// says), one dot product at a time, each summed across its lanes once; the first row of each head carries
// the prefetches of its keys' rows.
template <typename T, class Scales, class PrefetchLines>
HWY_INLINE void ScoreBlock(const float* Q, std::int64_t H, std::int64_t R, std::int64_t ldq, const T* const* K,
                           std::int64_t head_stride, std::int64_t width, std::int64_t cols, float* S,
                           const Scales& k_scales, const PrefetchLines& prefetch_lines) {
  const DF df;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  for (std::int64_t r = 0; r < H * R; ++r) {
    const std::int64_t head = r / R * head_stride;
    const Scales head_scales = k_scales.ForHead(r / R);
    for (std::int64_t c = 0; c < cols; ++c) {
      if (r % R == 0) {
        for (std::int64_t e = 0; e < width; e += 64 / sizeof(T)) prefetch_lines(c, 1, head, e * sizeof(T));
      }
      VF acc = hn::Zero(df);
      for (std::int64_t e = 0; e < width; e += N) {
        acc = hn::MulAdd(hn::Load(df, Q + r * ldq + e), LoadScaled(df, K[c] + head, e, c, head_scales), acc);
      }
      S[r * kBc + c] = hn::GetLane(hn::SumOfLanes(df, acc));
    }
  }
}
#else
// S[r][c0 + c] = Q_r · K_{c0 + c} for a tile of kR rows × kC keys (kR·kC = kLanes) over `width` features
// (a multiple of kLanes): Q rows ldq apart (float32), K rows at K[c] + head (float32 or the cache's type,
// widened and scaled as `k_scales` says as loaded). Keys past `cols` (their pointers repeat a real row) are
// computed, not stored.
// As each 64-byte line of the K rows is reached, `prefetch_lines(c0, kC, head, byte)` runs for the tile's keys,
// so that prefetches go out at the pace the rows are read (a burst of them stalls on the miss buffers). It
// exists only where vectors have a fixed size and can form arrays (kLanes > 0), so its accumulators may be
// an array.
template <int kR, int kC, typename T, class Scales, class PrefetchLines>
HWY_INLINE void ScoreTile(const float* HWY_RESTRICT Q, std::int64_t ldq, const T* const* K, std::int64_t head,
                          std::int64_t width, std::int64_t c0, std::int64_t cols, float* HWY_RESTRICT S,
                          const Scales& k_scales, const PrefetchLines& prefetch_lines) {
  constexpr int kN = kR * kC;
  constexpr std::int64_t kLineElements = 64 / sizeof(T);
  const DF df;
  VF acc[kN];
  HWY_UNROLL(16) for (int i = 0; i < kN; ++i) acc[i] = hn::Zero(df);
  for (std::int64_t e = 0; e < width; e += kLanes) {
    if (e % kLineElements == 0) {
      prefetch_lines(c0, kC, head, e * sizeof(T));
    }
    VF k[kC];
    HWY_UNROLL(16) for (int c = 0; c < kC; ++c) k[c] = LoadScaled(df, K[c0 + c] + head, e, c0 + c, k_scales);
    HWY_UNROLL(8) for (int r = 0; r < kR; ++r) {
      VF q = hn::Load(df, Q + r * ldq + e);
#if defined(__GNUC__) && !defined(__clang__) && HWY_ARCH_X86 && HWY_TARGET != HWY_SCALAR
      // Loaded once into a register: GCC would fold the load into each of the kC FMAs, 10 loads per 8 FMAs
      // in the 4×2 tile instead of 6 (docs/performance.md).
      asm("" : "+x"(q.raw));
#endif
      HWY_UNROLL(16) for (int c = 0; c < kC; ++c) acc[r * kC + c] = hn::MulAdd(q, k[c], acc[r * kC + c]);
    }
  }
  StoreDotTile<kR, kC>(ReduceTransposed<kN>(acc), c0, cols, S);
}

// Calls tile(kRows, r) for each tile of R rows: tiles of 8 rows (where a vector has 16 lanes), then 4, 2 and
// 1, so that a tile's kLanes dot products (kRows rows × kLanes / kRows keys) fill one vector. kRows is a
// std::integral_constant.
template <class Tile>
HWY_INLINE void ForEachRowTile(std::int64_t R, const Tile& tile) {
  std::int64_t r = 0;
  const auto rows_of = [&](auto kR) FLASHATTN_INLINE_LAMBDA {
    for (; r + decltype(kR)::value <= R; r += decltype(kR)::value) tile(kR, r);
  };
  if constexpr (kLanes >= 16) rows_of(std::integral_constant<int, 8>());
  if constexpr (kLanes >= 8) rows_of(std::integral_constant<int, 4>());
  if constexpr (kLanes >= 4) rows_of(std::integral_constant<int, 2>());
  rows_of(std::integral_constant<int, 1>());
}

// The walk of ScoreBlock's tiles over H heads of R rows and `cols` keys: the keys go in groups of kLanes, each
// group for every head before the next, so that a cache holding the heads of a key side by side is read in
// address order (head after head over a whole block reads it with a stride, which halved the bandwidth one
// core draws from memory). Within a head, R rows go in tiles (ForEachRowTile) over the group's keys, kC at a
// time: tile(kRows, kC, h, row, c0, first) for the tile of rows [row, row + kRows) (row = h·R + r) and keys
// [c0, c0 + kC), kRows and kC std::integral_constants, `first` for the head's first tile of rows, which
// carries the prefetches.
template <class Tile>
HWY_INLINE void ForEachScoreTile(std::int64_t H, std::int64_t R, std::int64_t cols, const Tile& tile) {
  for (std::int64_t g0 = 0; g0 < cols; g0 += kLanes) {
    for (std::int64_t h = 0; h < H; ++h) {
      ForEachRowTile(R, [&](auto kR, std::int64_t r) FLASHATTN_INLINE_LAMBDA {
        constexpr int kC = kLanes / decltype(kR)::value;
        for (std::int64_t c0 = g0; c0 < g0 + kLanes && c0 < cols; c0 += kC) {
          tile(kR, std::integral_constant<int, kC>(), h, h * R + r, c0, r == 0);
        }
      });
    }
  }
}

// S_h = Q_h K_{j,h}ᵀ for each of H heads h: R rows per head (Q_h rows ldq apart from Q + h·R·ldq, S_h rows
// kBc apart from S + h·R·kBc), `cols` keys whose rows are at K[c] + h·head_stride, scaled as `k_scales` says
// (head h's: k_scales.ForHead(h)), in ForEachScoreTile's order; the first tile of rows carries the prefetches
// (`prefetch_lines`, see ScoreTile).
template <typename T, class Scales, class PrefetchLines>
HWY_INLINE void ScoreBlock(const float* Q, std::int64_t H, std::int64_t R, std::int64_t ldq, const T* const* K,
                           std::int64_t head_stride, std::int64_t width, std::int64_t cols, float* S,
                           const Scales& k_scales, const PrefetchLines& prefetch_lines) {
  ForEachScoreTile(H, R, cols, [&](auto kR, auto kC, std::int64_t h, std::int64_t row, std::int64_t c0,
                                   bool first) FLASHATTN_INLINE_LAMBDA {
    constexpr int kRows = decltype(kR)::value, kCols = decltype(kC)::value;
    const float* Q_row = Q + row * ldq;
    const std::int64_t head = h * head_stride;
    const Scales head_scales = k_scales.ForHead(h);
    if (first) {
      ScoreTile<kRows, kCols>(Q_row, ldq, K, head, width, c0, cols, S + row * kBc, head_scales, prefetch_lines);
    } else {
      ScoreTile<kRows, kCols>(Q_row, ldq, K, head, width, c0, cols, S + row * kBc, head_scales, kNoLineRequests);
    }
  });
}
#endif  // FLASHATTN_DECODE_SIZELESS_VECTORS

// S[r][c] ← (S[r][c] · row_scale[r]) · key_scale[c] for R rows of kBc scores (kBc apart, aligned) and every
// c < kBc (key_scale holds kBc floats, aligned); without row scales, S[r][c] · key_scale[c].
HWY_INLINE void ScaleScores(float* HWY_RESTRICT S, std::int64_t R, const float* row_scale,
                            const float* HWY_RESTRICT key_scale) {
  const DF df;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  for (std::int64_t r = 0; r < R; ++r) {
    float* S_r = S + r * kBc;
    for (std::int64_t c = 0; c < kBc; c += N) {
      VF v = hn::Load(df, S_r + c);
      if (row_scale != nullptr) v = hn::Mul(v, hn::Set(df, row_scale[r]));
      hn::Store(hn::Mul(v, hn::Load(df, key_scale + c)), df, S_r + c);
    }
  }
}

#if !FLASHATTN_DECODE_SIZELESS_VECTORS
// Õ_r[e, e + 4·kLanes) += Σ_{c < cols} P̃[r][c] V_c[e, e + 4·kLanes) for kR ≤ 4 rows: 4·kR accumulators
// where there are 32 vector registers, so that each key's broadcast of P̃[r][c] serves four FMAs and its four
// V vectors (widened once) serve every row. `each_key(c)` runs as key c is reached.
template <int kR, typename T, class Scales, class EachKey>
HWY_INLINE void AccumulateWideSlice(const float* HWY_RESTRICT P, const T* const* V, std::int64_t cols,
                                    std::int64_t e, float* HWY_RESTRICT O, std::int64_t ldo, const Scales& v_scales,
                                    const EachKey& each_key) {
  static_assert(kR <= 4 && kLanes >= 16, "16 accumulators need 32 vector registers");
  const DF df;
  VF acc[kR][4];
  HWY_UNROLL(4) for (int r = 0; r < kR; ++r) {
    HWY_UNROLL(4) for (int i = 0; i < 4; ++i) acc[r][i] = hn::LoadU(df, O + r * ldo + e + i * kLanes);
  }
  for (std::int64_t c = 0; c < cols; ++c) {
    each_key(c);
    VF v[4];
    HWY_UNROLL(4) for (int i = 0; i < 4; ++i) v[i] = LoadScaled(df, V[c], e + i * kLanes, c, v_scales);
    HWY_UNROLL(4) for (int r = 0; r < kR; ++r) {
      const VF a = hn::Set(df, P[r * kBc + c]);
      HWY_UNROLL(4) for (int i = 0; i < 4; ++i) acc[r][i] = hn::MulAdd(a, v[i], acc[r][i]);
    }
  }
  HWY_UNROLL(4) for (int r = 0; r < kR; ++r) {
    HWY_UNROLL(4) for (int i = 0; i < 4; ++i) hn::StoreU(acc[r][i], df, O + r * ldo + e + i * kLanes);
  }
}
#endif

// Õ_r += Σ_{c < cols} P̃[r][c] V_c for kR rows (P rows kBc apart, Õ rows ldo apart, V rows where V[c]
// points), over `width` features (a multiple of Lanes), two vectors at a time so that each V load serves kR
// rows and 2·kR FMA chains run side by side; four vectors at a time for up to 4 rows where there are 32 vector
// registers. Every element of Õ takes its FMAs in key order whatever the slices. `prefetch_key(c)` runs once
// for each key: as the first four-vector slice reaches it, or before the tile where there is none.
template <int kR, typename T, class Scales, class PrefetchKey>
HWY_INLINE void AccumulatePV(const float* HWY_RESTRICT P, const T* const* V, std::int64_t cols,
                             std::int64_t width, float* HWY_RESTRICT O, std::int64_t ldo, const Scales& v_scales,
                             const PrefetchKey& prefetch_key) {
  const DF df;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  std::int64_t e = 0;
#if !FLASHATTN_DECODE_SIZELESS_VECTORS
  if constexpr (kLanes >= 16 && kR <= 4) {
    for (; e + 4 * N <= width; e += 4 * N) {
      // one instance of the slice for every e, the first one's requests switched on by a test: half the code to
      // compile of a second instance without them, and the same time (docs/robustness.md)
      const bool first_slice = e == 0;
      const auto key = [&](std::int64_t c) FLASHATTN_INLINE_LAMBDA {
        if (first_slice) prefetch_key(c);
      };
      AccumulateWideSlice<kR>(P, V, cols, e, O, ldo, v_scales, key);
    }
  }
#endif
  if (e == 0) {
    for (std::int64_t c = 0; c < cols; ++c) prefetch_key(c);
  }
  // Õ_r[e, e + kVecs·N) as one register tile: P[r][c] broadcast, V_c's vectors loaded once for all rows
  const auto start = [&](int r, int v) FLASHATTN_INLINE_LAMBDA { return hn::Load(df, O + r * ldo + e + v * N); };
  const auto a_of = [&](int r, std::int64_t c) FLASHATTN_INLINE_LAMBDA { return P[r * kBc + c]; };
  const auto b_of = [&](std::int64_t c, int v) FLASHATTN_INLINE_LAMBDA {
    return LoadScaled(df, V[c], e + v * N, c, v_scales);
  };
  const auto finish = [&](int r, int v, VF o) FLASHATTN_INLINE_LAMBDA { hn::Store(o, df, O + r * ldo + e + v * N); };
  const auto slice = [&](auto vecs) FLASHATTN_INLINE_LAMBDA {
    RegisterTile<kR, decltype(vecs)::value>(0, cols, start, a_of, b_of, finish);
  };
  for (; e + 2 * N <= width; e += 2 * N) slice(std::integral_constant<int, 2>());
  if (e < width) slice(std::integral_constant<int, 1>());  // one vector left
}

// The largest row tile AccumulateBlock uses: 8 rows × 2 vectors where there are 32 vector registers
// (AVX-512: 16 accumulators), 4 rows elsewhere.
inline constexpr std::int64_t kMaxAccumulateRows = kLanes >= 16 ? 8 : 4;

// From this many rows per K/V head on, a pass of AccumulateBlock takes the whole block: each row tile loads and
// stores its Õ once per pass, and with many rows (multi-head latent attention: 128 query heads on one K/V
// head, dv = 512, an Õ of 256 KiB in L2) those round trips cost more than the V lines re-read from L2.
inline constexpr std::int64_t kWholeBlockPassRows = 32;

// Keys per pass of AccumulateBlock for R rows over V rows of `row_bytes`, `stride_bytes` apart from key to key.
// A pass reads its keys' V rows a slice of features at a time, so the rows must stay in L1 from one slice to
// the next. Rows whose starts fall on few of the 64 sets of an L1 evict each other: in a (seq, head, dim)
// cache with 8 heads at d = 128 they are 2 KiB apart and all fall into 8 sets, which a pass over the block's
// 32 keys filled twice over on an 8-way L1 (the smallest the kernel meets). A pass takes the most keys (a
// power of two) that put at most 4 lines on any set; rows one after another take the whole block.
inline std::int64_t AccumulatePassKeys(std::int64_t R, std::int64_t stride_bytes, std::int64_t row_bytes) {
  constexpr std::int64_t kSets = 64, kLinesPerSet = 4;
  if (R >= kWholeBlockPassRows) return kBc;
  const std::int64_t row_lines = (row_bytes + 63) / 64 + (row_bytes % 64 != 0 ? 1 : 0);
  const std::int64_t stride_lines = stride_bytes / 64;
  const std::int64_t starts = stride_bytes % 64 != 0 || stride_lines == 0 ? kSets
                                                                          : kSets / std::gcd(stride_lines, kSets);
  const std::int64_t sets = std::min(kSets, starts * row_lines);
  std::int64_t keys = kBc;
  while (keys > 4 && (keys * row_lines + sets - 1) / sets > kLinesPerSet) keys /= 2;
  return keys;
}

// Õ = diag(α) Õ + P̃ V_j for all R rows (α null: Õ + P̃ V_j): Õ scaled first, then the keys in passes of
// `pass_keys` (AccumulatePassKeys), each pass over the rows in tiles of
// kMaxAccumulateRows rows, then 4 and 1; V's rows scaled as `v_scales` says. `prefetch_pass(c, 1)` runs for each
// key c of a pass as the pass's first tile of rows reads it (AccumulatePV), so that the requests keep pace with
// the reads.
template <typename T, class Scales, class PrefetchPass>
HWY_INLINE void AccumulateBlock(const float* P, const float* alpha, const T* const* V, std::int64_t R,
                                std::int64_t cols, std::int64_t width, float* O, std::int64_t ldo,
                                std::int64_t pass_keys, const Scales& v_scales, const PrefetchPass& prefetch_pass) {
  const DF df;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  for (std::int64_t r = 0; r < R && alpha != nullptr; ++r) {
    if (alpha[r] == 1.0f) continue;
    const VF a = hn::Set(df, alpha[r]);
    float* O_r = O + r * ldo;
    for (std::int64_t e = 0; e < width; e += N) hn::Store(hn::Mul(a, hn::Load(df, O_r + e)), df, O_r + e);
  }
  for (std::int64_t c0 = 0; c0 < cols; c0 += pass_keys) {
    const std::int64_t keys = std::min(pass_keys, cols - c0);
    // the pass's prefetches go out key by key with its first tile of rows
    const auto first = [&](std::int64_t c) FLASHATTN_INLINE_LAMBDA { prefetch_pass(c0 + c, 1); };
    const Scales pass_scales = v_scales.FromKey(c0);
    const auto tile = [&](auto kR, std::int64_t r) FLASHATTN_INLINE_LAMBDA {
      constexpr int kRows = decltype(kR)::value;
      const float* P_r = P + r * kBc + c0;
      // one instance of each tile, its requests switched by the row (as in AccumulatePV)
      const auto key = [&](std::int64_t c) FLASHATTN_INLINE_LAMBDA {
        if (r == 0) first(c);
      };
      AccumulatePV<kRows>(P_r, V + c0, keys, width, O + r * ldo, ldo, pass_scales, key);
    };
    std::int64_t r = 0;
    if constexpr (kMaxAccumulateRows == 8) {
      for (; r + 8 <= R; r += 8) tile(std::integral_constant<int, 8>(), r);
    }
    for (; r + 4 <= R; r += 4) tile(std::integral_constant<int, 4>(), r);
    for (; r < R; ++r) tile(std::integral_constant<int, 1>(), r);
  }
}

}  // namespace flashattn::HWY_NAMESPACE::decode_kernel
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_DECODE_ATTEND_TILES_INL_H_
