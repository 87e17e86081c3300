// AttendChunk per Highway target: FlashAttention-2's inner loop over blocks of Bc keys, for the R query
// rows that share one K/V head, head after head within each block (SPEC §3):
//   K_j, V_j → float32 block in L1                       LoadBlock (widens float16/bfloat16 once per key)
//   S_j = Score(Q K_jᵀ)                                 R×Bc, ScoreTile + ReduceTransposed
//   m_new = max(m, rowmax S_j),  P̃_j = e^{S_j − m_new}   OnlineSoftmax
//   l = e^{m − m_new} l + rowsum P̃_j,  Õ = e^{m − m_new} Õ + P̃_j V_j   (AccumulatePV)
//   O = Õ / l,  LSE = m + log l
// Each K and V row is read from the cache once and widened once, into a zero-padded float32 block that
// every group of query rows then reads from L1. The dot products of a register tile of rows × keys are
// reduced together by a transposing tree (ReduceTransposed), about 3 operations per dot product instead of
// a horizontal sum of ~10 each. The rows of the unit two (block, head) units ahead are prefetched while a
// unit is computed.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "decode/attend.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "common/element.h"
#include "decode/attend.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "kernels/vec_exp-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::decoding::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

inline constexpr std::int64_t kBc = kDecodeBc;
inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Lanes of a float vector when the target fixes it at compile time (every x86 and NEON target), else 0.
#if HWY_HAVE_SCALABLE
inline constexpr int kLanes = 0;
#else
inline constexpr int kLanes = static_cast<int>(hn::MaxLanes(DF()));
#endif

HWY_INLINE VF LoadF32(DF df, const float* p) { return hn::LoadU(df, p); }
HWY_INLINE VF LoadF32(DF df, const hwy::float16_t* p) {
  return hn::PromoteTo(df, hn::LoadU(hn::Rebind<hwy::float16_t, DF>(), p));
}
HWY_INLINE VF LoadF32(DF df, const hwy::bfloat16_t* p) {
  return hn::PromoteTo(df, hn::LoadU(hn::Rebind<hwy::bfloat16_t, DF>(), p));
}
HWY_INLINE float ScalarF32(float x) { return x; }
HWY_INLINE float ScalarF32(hwy::float16_t x) { return F32FromF16(std::bit_cast<std::uint16_t>(x)); }
HWY_INLINE float ScalarF32(hwy::bfloat16_t x) { return F32FromBF16(std::bit_cast<std::uint16_t>(x)); }

// dst[0, d_pad) = float32(src[0, d)), zero beyond d.
template <typename T>
HWY_INLINE void WidenRow(const T* HWY_RESTRICT src, std::int64_t d, std::int64_t d_pad, float* HWY_RESTRICT dst) {
  const DF df;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  std::int64_t e = 0;
  for (; e + N <= d; e += N) hn::Store(LoadF32(df, src + e), df, dst + e);
  for (; e < d; ++e) dst[e] = ScalarF32(src[e]);
  for (; e < d_pad; ++e) dst[e] = 0.0f;
}

#if HWY_TARGET == HWY_SCALAR
template <int kN>
HWY_INLINE VF ReduceTransposed(const VF* acc) {
  static_assert(kN == 1);
  return acc[0];
}
#else
// For kLanes = 4·2^k: one vector whose lane i is the sum of the lanes of acc[i], for i < kLanes. First
// within each 128-bit block (four vectors at a time, by 32- then 64-bit interleaves), then across blocks
// (halves, then adjacent blocks); 3 operations per sum instead of a horizontal sum each.
HWY_INLINE VF SumsWithinBlocks(VF a, VF b, VF c, VF d) {
  const DF df;
  const hn::Repartition<std::uint64_t, DF> du64;
  const VF ab = hn::Add(hn::InterleaveLower(df, a, b), hn::InterleaveUpper(df, a, b));  // a0+a2 b0+b2 a1+a3 b1+b3
  const VF cd = hn::Add(hn::InterleaveLower(df, c, d), hn::InterleaveUpper(df, c, d));
  const auto ab64 = hn::BitCast(du64, ab), cd64 = hn::BitCast(du64, cd);
  return hn::Add(hn::BitCast(df, hn::InterleaveLower(du64, ab64, cd64)),
                 hn::BitCast(df, hn::InterleaveUpper(du64, ab64, cd64)));  // Σa Σb Σc Σd per block
}

template <int kN>
HWY_INLINE VF ReduceTransposed(const VF* acc) {
  const DF df;
  if constexpr (kN == 4) {
    return SumsWithinBlocks(acc[0], acc[1], acc[2], acc[3]);
  } else if constexpr (kN == 8) {  // blocks [W0 | W1] → lanes 0-3 from acc 0-3, 4-7 from acc 4-7
    const VF w0 = SumsWithinBlocks(acc[0], acc[1], acc[2], acc[3]);
    const VF w1 = SumsWithinBlocks(acc[4], acc[5], acc[6], acc[7]);
    return hn::Add(hn::ConcatLowerLower(df, w1, w0), hn::ConcatUpperUpper(df, w1, w0));
  } else {
    static_assert(kN == 16, "fixed-width float vectors have 4, 8 or 16 lanes beyond the scalar target");
    // s01 = [x0 x1 y0 y1] holds ΣW_a = x0 + x1, ΣW_b = y0 + y1 by blocks; s23 = [z0 z1 w0 w1] likewise. W_b
    // is built from acc 8-11 and W_c from 4-7 so that the blocks of the result come out in order.
    const VF wa = SumsWithinBlocks(acc[0], acc[1], acc[2], acc[3]);
    const VF wb = SumsWithinBlocks(acc[8], acc[9], acc[10], acc[11]);
    const VF wc = SumsWithinBlocks(acc[4], acc[5], acc[6], acc[7]);
    const VF wd = SumsWithinBlocks(acc[12], acc[13], acc[14], acc[15]);
    const VF s01 = hn::Add(hn::ConcatLowerLower(df, wb, wa), hn::ConcatUpperUpper(df, wb, wa));
    const VF s23 = hn::Add(hn::ConcatLowerLower(df, wd, wc), hn::ConcatUpperUpper(df, wd, wc));
    const VF firsts = hn::OddEvenBlocks(hn::SwapAdjacentBlocks(s23), s01);   // x0 z0 y0 w0
    const VF seconds = hn::OddEvenBlocks(s23, hn::SwapAdjacentBlocks(s01));  // x1 z1 y1 w1
    return hn::Add(firsts, seconds);
  }
}
#endif  // HWY_TARGET == HWY_SCALAR

// Requests the K and V rows of one key (row_bytes each) into the cache.
template <typename T>
HWY_INLINE void PrefetchKey(const T* k_row, const T* v_row, std::int64_t row_bytes) {
  for (std::int64_t byte = 0; byte < row_bytes; byte += 64) {
    hwy::Prefetch(reinterpret_cast<const char*>(k_row) + byte);
    hwy::Prefetch(reinterpret_cast<const char*>(v_row) + byte);
  }
}

// The keys whose K and V rows are requested while a block's scores are computed, a few before each tile
// so that the requests keep pace with the loads (a burst of them stalls on the miss buffers): key c's rows
// are at k + offset[c] and v + offset[c], for c < count.
template <typename T>
struct PrefetchPlan {
  const T* k = nullptr;
  const T* v = nullptr;
  const std::int64_t* offset = nullptr;
  std::int64_t count = 0;
  std::int64_t row_bytes = 0;

  HWY_INLINE void Keys(std::int64_t begin, std::int64_t end) const {
    for (std::int64_t c = begin; c < std::min(end, count); ++c) PrefetchKey(k + offset[c], v + offset[c], row_bytes);
  }
};

// S[r][c0 + c] = Q_r · K_{c0 + c} for a tile of kR rows × kC keys (kR·kC = kLanes) over `width` features
// (a multiple of kLanes): Q rows ldq apart (float32), K rows wherever K[c] points (float32 or the cache's
// type, widened as loaded). Keys past `cols` (their pointers repeat a real row) are computed, not stored.
template <int kR, int kC, typename T>
HWY_INLINE void ScoreTile(const float* HWY_RESTRICT Q, std::int64_t ldq, const T* const* K, std::int64_t width,
                          std::int64_t c0, std::int64_t cols, float* HWY_RESTRICT S) {
  constexpr int kN = kR * kC;
  const DF df;
  VF acc[kN];
  HWY_UNROLL(16) for (int i = 0; i < kN; ++i) acc[i] = hn::Zero(df);
  for (std::int64_t e = 0; e < width; e += kLanes) {
    VF k[kC];
    HWY_UNROLL(16) for (int c = 0; c < kC; ++c) k[c] = LoadF32(df, K[c0 + c] + e);
    HWY_UNROLL(8) for (int r = 0; r < kR; ++r) {
      const VF q = hn::Load(df, Q + r * ldq + e);
      HWY_UNROLL(16) for (int c = 0; c < kC; ++c) acc[r * kC + c] = hn::MulAdd(q, k[c], acc[r * kC + c]);
    }
  }
  alignas(64) float dots[kN];
  hn::Store(ReduceTransposed<kN>(acc), df, dots);
  if (c0 + kC <= cols) {  // a whole tile: fixed-size copies
    HWY_UNROLL(8) for (int r = 0; r < kR; ++r) {
      HWY_UNROLL(16) for (int c = 0; c < kC; ++c) S[r * kBc + c0 + c] = dots[r * kC + c];
    }
  } else {
    for (int r = 0; r < kR; ++r)
      for (std::int64_t c = 0; c < cols - c0; ++c) S[r * kBc + c0 + c] = dots[r * kC + c];
  }
}

// S = Q K_jᵀ for `rows` rows (Q rows ldq apart, S rows kBc apart) over `cols` keys, each tile of keys
// after the prefetches of as many keys of `prefetch`.
template <int kR, typename T, typename U>
HWY_INLINE void ScoreRows(const float* Q, std::int64_t ldq, const T* const* K, std::int64_t width,
                          std::int64_t cols, float* S, const PrefetchPlan<U>& prefetch) {
  constexpr int kC = kLanes / kR;
  for (std::int64_t c0 = 0; c0 < cols; c0 += kC) {
    prefetch.Keys(c0, c0 + kC);
    ScoreTile<kR, kC>(Q, ldq, K, width, c0, cols, S);
  }
}

// The largest row tile ScoreBlock uses: 8 rows where a vector has 16 lanes, 4 where it has 8, 2 where 4.
inline constexpr std::int64_t kMaxScoreRows = kLanes >= 16 ? 8 : kLanes >= 4 ? kLanes / 2 : 1;

// All R rows in tiles of kMaxScoreRows rows, then 4, 2 and 1, over `cols` keys (S rows kBc apart); the
// first pass over the keys carries `prefetch`.
template <typename T, typename U>
HWY_INLINE void ScoreBlock(const float* Q, std::int64_t R, std::int64_t ldq, const T* const* K,
                           std::int64_t width, std::int64_t cols, float* S, PrefetchPlan<U> prefetch) {
  if constexpr (kLanes == 0) {  // scalable vectors: one horizontal sum per dot product
    const DF df;
    const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
    prefetch.Keys(0, cols);
    for (std::int64_t r = 0; r < R; ++r)
      for (std::int64_t c = 0; c < cols; ++c) {
        VF acc = hn::Zero(df);
        for (std::int64_t e = 0; e < width; e += N)
          acc = hn::MulAdd(hn::Load(df, Q + r * ldq + e), LoadF32(df, K[c] + e), acc);
        S[r * kBc + c] = hn::GetLane(hn::SumOfLanes(df, acc));
      }
  } else {
    std::int64_t r = 0;
    const auto rows_of = [&](auto kR) {  // every tile of kR rows, the first of them with the prefetches
      constexpr int kRows = decltype(kR)::value;
      for (; r + kRows <= R; r += kRows) {
        ScoreRows<kRows>(Q + r * ldq, ldq, K, width, cols, S + r * kBc, prefetch);
        prefetch.count = 0;
      }
    };
    if constexpr (kLanes >= 16) rows_of(std::integral_constant<int, 8>());
    if constexpr (kLanes >= 8) rows_of(std::integral_constant<int, 4>());
    if constexpr (kLanes >= 4) rows_of(std::integral_constant<int, 2>());
    rows_of(std::integral_constant<int, 1>());
  }
}

// Õ_r = α_r·Õ_r + Σ_{c < cols} P̃[r][c] V_c for kR rows (P rows kBc apart, Õ rows ldo apart, V rows where
// V[c] points), over `width` features (a multiple of Lanes), two vectors at a time so that each V load
// serves kR rows and 2·kR FMA chains run side by side.
template <int kR, typename T>
HWY_INLINE void AccumulatePV(const float* HWY_RESTRICT P, const float* HWY_RESTRICT alpha, const T* const* V,
                             std::int64_t cols, std::int64_t width, float* HWY_RESTRICT O, std::int64_t ldo) {
  const DF df;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  std::int64_t e = 0;
  for (; e + 2 * N <= width; e += 2 * N) {
    VF o[kR][2];
    HWY_UNROLL(8) for (int r = 0; r < kR; ++r) {
      const VF a = hn::Set(df, alpha[r]);
      o[r][0] = hn::Mul(a, hn::Load(df, O + r * ldo + e));
      o[r][1] = hn::Mul(a, hn::Load(df, O + r * ldo + e + N));
    }
    for (std::int64_t c = 0; c < cols; ++c) {
      const VF v0 = LoadF32(df, V[c] + e), v1 = LoadF32(df, V[c] + e + N);
      HWY_UNROLL(8) for (int r = 0; r < kR; ++r) {
        const VF p = hn::Set(df, P[r * kBc + c]);
        o[r][0] = hn::MulAdd(p, v0, o[r][0]);
        o[r][1] = hn::MulAdd(p, v1, o[r][1]);
      }
    }
    HWY_UNROLL(8) for (int r = 0; r < kR; ++r) {
      hn::Store(o[r][0], df, O + r * ldo + e);
      hn::Store(o[r][1], df, O + r * ldo + e + N);
    }
  }
  if (e < width) {  // one vector left
    VF o[kR];
    HWY_UNROLL(8) for (int r = 0; r < kR; ++r) {
      o[r] = hn::Mul(hn::Set(df, alpha[r]), hn::Load(df, O + r * ldo + e));
    }
    for (std::int64_t c = 0; c < cols; ++c) {
      const VF v = LoadF32(df, V[c] + e);
      HWY_UNROLL(8) for (int r = 0; r < kR; ++r) o[r] = hn::MulAdd(hn::Set(df, P[r * kBc + c]), v, o[r]);
    }
    HWY_UNROLL(8) for (int r = 0; r < kR; ++r) hn::Store(o[r], df, O + r * ldo + e);
  }
}

// The largest row tile AccumulateBlock uses: 8 rows × 2 vectors where there are 32 vector registers
// (AVX-512: 16 accumulators), 4 rows elsewhere.
inline constexpr std::int64_t kMaxAccumulateRows = kLanes >= 16 ? 8 : 4;

// All R rows in tiles of kMaxAccumulateRows rows, then 4 and 1.
template <typename T>
HWY_INLINE void AccumulateBlock(const float* P, const float* alpha, const T* const* V, std::int64_t R,
                                std::int64_t cols, std::int64_t width, float* O, std::int64_t ldo) {
  std::int64_t r = 0;
  if constexpr (kMaxAccumulateRows == 8) {
    for (; r + 8 <= R; r += 8) AccumulatePV<8>(P + r * kBc, alpha + r, V, cols, width, O + r * ldo, ldo);
  }
  for (; r + 4 <= R; r += 4) AccumulatePV<4>(P + r * kBc, alpha + r, V, cols, width, O + r * ldo, ldo);
  for (; r < R; ++r) AccumulatePV<1>(P + r * kBc, alpha + r, V, cols, width, O + r * ldo, ldo);
}

// m_new = max(m, rowmax S), P̃ = e^{S − m_new} (in place, −∞ → 0), l = e^{m − m_new} l + rowsum P̃; returns
// α = e^{m − m_new}, the factor of Õ_r (1 while nothing is visible: Õ_r is still 0). A row of Bc scores,
// `cols` of them real.
HWY_INLINE float OnlineSoftmax(float* S_r, std::int64_t cols, float* m, float* l) {
  const DF df;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  std::fill(S_r + cols, S_r + kBc, kNegInf);
  VF row_max = hn::Set(df, kNegInf);
  for (std::int64_t c = 0; c < kBc; c += N) row_max = hn::Max(row_max, hn::LoadU(df, S_r + c));
  // A NaN score makes the row NaN (IEEE arithmetic): std::max would drop a NaN maximum, and x86's max drops
  // a NaN operand in some orders, so a row that would otherwise see nothing is searched for one.
  const float block_max = hn::GetLane(hn::MaxOfLanes(df, row_max));
  float m_new = std::isnan(block_max) ? block_max : std::max(*m, block_max);
  if (m_new == kNegInf) {
    if (std::none_of(S_r, S_r + cols, [](float s) { return std::isnan(s); })) {
      std::fill(S_r, S_r + kBc, 0.0f);  // nothing visible yet: P̃ = 0, state unchanged
      return 1.0f;
    }
    m_new = std::numeric_limits<float>::quiet_NaN();
  }
  const VF m_new_v = hn::Set(df, m_new);
  VF row_sum = hn::Zero(df);
  for (std::int64_t c = 0; c < kBc; c += N) {
    const VF P = kernels::HWY_NAMESPACE::Exp(df, hn::Sub(hn::LoadU(df, S_r + c), m_new_v));  // e^{−∞} = 0
    hn::StoreU(P, df, S_r + c);
    row_sum = hn::Add(row_sum, P);
  }
  // α = e^{m − m_new}: exactly 1 while the maximum stands (most blocks), else through the vector exp
  // (a libm call per row and block cost more than the block's exponentials)
  float alpha = 1.0f;
  if (*m == kNegInf) {
    alpha = 0.0f;
  } else if (*m != m_new) {
    alpha = hn::GetLane(kernels::HWY_NAMESPACE::Exp(df, hn::Set(df, *m - m_new)));
  }
  *l = alpha * *l + hn::GetLane(hn::SumOfLanes(df, row_sum));
  *m = m_new;
  return alpha;
}

// Whether any of the `cols` rows V[c] (d elements each) holds an inf or a NaN.
template <typename T>
bool HasNonFiniteRow(const T* const* V, std::int64_t cols, std::int64_t d) {
  for (std::int64_t c = 0; c < cols; ++c)
    for (std::int64_t e = 0; e < d; ++e)
      if (!std::isfinite(ScalarF32(V[c][e]))) return true;
  return false;
}

// Õ_r = α_r·Õ_r + Σ_{keys c that row r sees} P̃[r][c] V_c (rows of `heads`' R rows, Õ rows ldo apart),
// scalar: the path of a block that hides keys from some rows and holds a non-finite value. A hidden key's
// P̃ is 0, but it is left out instead of multiplied by 0, so that its inf or NaN (0·NaN = NaN) does not reach
// rows that cannot see it.
template <typename T>
void AccumulateSeenKeys(const ScoreMods& mods, const std::int64_t* diagonal, std::int64_t R, std::int64_t j0,
                        const float* P, const float* alpha, const T* const* V, std::int64_t cols,
                        std::int64_t d, float* O, std::int64_t ldo) {
  for (std::int64_t r = 0; r < R; ++r) {
    float* O_r = O + r * ldo;
    for (std::int64_t e = 0; e < d; ++e) O_r[e] *= alpha[r];
    for (std::int64_t c = 0; c < cols; ++c) {
      if (!mods.Visible(diagonal[r], j0 + c)) continue;
      for (std::int64_t e = 0; e < d; ++e) O_r[e] += P[r * kBc + c] * ScalarF32(V[c][e]);
    }
  }
}

// Element offset of key j's row (K/V head 0) in its sequence's cache: contiguous, or through the pages.
HWY_INLINE std::int64_t KeyOffset(const KvSource& kv, std::int64_t j) {
  if (kv.page_size == 0) return j * kv.seq_stride;
  return kv.pages[j / kv.page_size] * kv.page_stride + (j % kv.page_size) * kv.seq_stride;
}

template <typename T>
void AttendChunkT(const ChunkTask& t, float* scratch) {
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(DF()));
  const std::int64_t H = t.heads, R = t.R, d = t.d, d_pad = (d + N - 1) / N * N;
  const AttendScratch x = AttendScratch::Carve(scratch, H, R, d);
  std::fill(x.m, x.m + H * R, kNegInf);
  std::fill(x.l, x.l + H * R, 0.0f);
  std::fill(x.O, x.O + H * R * d_pad, 0.0f);
  std::fill(x.K, x.K + kBc * d_pad, 0.0f);  // widened K and V blocks: rows past a short block stay finite
  std::fill(x.V, x.V + kBc * d_pad, 0.0f);
  // Q_r pre-scaled by s, so that a block no mask or modifier touches needs nothing more than Q K_jᵀ; the
  // other blocks apply the rest of ScoreMods with scale 1.
  for (std::int64_t row = 0; row < H * R; ++row) {
    for (std::int64_t e = 0; e < d; ++e) x.Q[row * d_pad + e] = t.mods.scale * t.Q[row * d + e];
    std::fill(x.Q + row * d_pad + d, x.Q + (row + 1) * d_pad, 0.0f);
  }
  ScoreMods mods = t.mods;
  mods.scale = 1.0f;
  std::int64_t offset[kBc], next_offset[kBc];  // element offsets of the block's key rows (K/V head 0)
  // K and V rows are read straight from the cache when every feature is in a whole vector and one register
  // tile holds all R rows, so that each element is loaded and widened once anyway. Otherwise they are
  // widened once per block into zero-padded float32 rows that every row tile then reads from L1.
  const bool widen = d % N != 0 || R > std::min(kMaxScoreRows, kMaxAccumulateRows);
  const T* K[kBc];
  const T* V[kBc];
  const float* K_wide[kBc];
  const float* V_wide[kBc];
  for (std::int64_t c = 0; c < kBc; ++c) K_wide[c] = x.K + c * d_pad, V_wide[c] = x.V + c * d_pad;
  const KvSource& kv = t.kv;
  const auto* k_base = static_cast<const T*>(kv.k);
  const auto* v_base = static_cast<const T*>(kv.v);

  // Rows whose scores need nothing but the scale (no softcap, no ALiBi) in blocks every row sees in full
  // take a vector path; the others go through ScoreMods::Score element by element.
  std::int64_t diag_min = std::numeric_limits<std::int64_t>::max();
  std::int64_t diag_max = std::numeric_limits<std::int64_t>::min();
  for (std::int64_t r = 0; r < R; ++r) {
    diag_min = std::min(diag_min, t.diagonal[r]);
    diag_max = std::max(diag_max, t.diagonal[r]);
  }
  bool slopes = false;
  for (std::int64_t r = 0; r < H * R; ++r) slopes = slopes || t.slope[r] != 0.0f;
  const bool plain_mods = R > 0 && t.mods.softcap == 0.0f && !slopes;  // R = 0: no diagonals to test

  // Software prefetch: while one (block, head) unit is computed, the K and V rows of the unit `ahead` units
  // later (2, or the next block when there is one head) are requested, so that the cache is streamed at
  // the memory's pace rather than at the pace of demand misses.
  // One head with contiguous rows is a single sequential stream per K and V, which the hardware prefetcher
  // follows by itself (software prefetches there measured 10-15% slower); strided heads and pages are not.
  const std::int64_t ahead = H >= 2 ? 2 : 1;
  const bool prefetch = H >= 2 || kv.page_size != 0 || kv.seq_stride != d;
  const std::int64_t row_bytes = d * static_cast<std::int64_t>(sizeof(T));

  for (std::int64_t j0 = t.j_begin; j0 < t.j_end; j0 += kBc) {
    const std::int64_t cols = std::min(kBc, t.j_end - j0);
    const std::int64_t next_cols = std::clamp<std::int64_t>(t.j_end - j0 - kBc, 0, kBc);
    for (std::int64_t c = 0; c < cols; ++c) offset[c] = KeyOffset(kv, j0 + c);  // through the pages if paged
    for (std::int64_t c = 0; c < next_cols; ++c) next_offset[c] = KeyOffset(kv, j0 + kBc + c);
    // Whether every row sees every key of the block (the window covers [j0, j0 + cols)), and so whether
    // the block's scores need nothing but Q K_jᵀ.
    const bool block_seen_whole = R > 0 && t.mods.Visible(diag_max, j0) && t.mods.Visible(diag_min, j0 + cols - 1);
    const bool full_block = plain_mods && block_seen_whole;
    for (std::int64_t hk = 0; hk < H; ++hk) {
      // The unit to prefetch: head hk + ahead, maybe of the next block. Its rows are requested one key at
      // a time as this unit's rows are read, so that requests keep pace with the loads instead of filling
      // every miss buffer at once.
      const bool same_block = hk + ahead < H;
      const std::int64_t pf_head = same_block ? hk + ahead : hk + ahead - H;
      const std::int64_t pf_cols = !prefetch ? 0 : same_block ? cols : next_cols;
      const std::int64_t* pf_offset = same_block ? offset : next_offset;
      const T* pf_k = k_base + pf_head * t.head_stride;
      const T* pf_v = v_base + pf_head * t.head_stride;
      float* S_h = x.S + hk * R * kBc;
      float* O_h = x.O + hk * R * d_pad;
      const float* Q_h = x.Q + hk * R * d_pad;
      if (widen) {  // K_j, V_j widened once into the float32 blocks
        for (std::int64_t c = 0; c < std::max(cols, pf_cols); ++c) {
          if (c < pf_cols) PrefetchKey(pf_k + pf_offset[c], pf_v + pf_offset[c], row_bytes);
          if (c >= cols) continue;
          WidenRow(k_base + hk * t.head_stride + offset[c], d, d_pad, x.K + c * d_pad);
          WidenRow(v_base + hk * t.head_stride + offset[c], d, d_pad, x.V + c * d_pad);
        }
        ScoreBlock(Q_h, R, d_pad, K_wide, d_pad, cols, S_h, PrefetchPlan<T>());
      } else {  // straight from the cache
        for (std::int64_t c = 0; c < kBc; ++c) {
          K[c] = k_base + hk * t.head_stride + offset[c < cols ? c : 0];
          V[c] = v_base + hk * t.head_stride + offset[c < cols ? c : 0];
        }
        ScoreBlock(Q_h, R, d_pad, K, d, cols, S_h, PrefetchPlan<T>{pf_k, pf_v, pf_offset, pf_cols, row_bytes});
      }
      for (std::int64_t r = 0; r < R; ++r) {
        float* S_r = S_h + r * kBc;
        if (!full_block) {
          const float slope = t.slope[hk * R + r];
          for (std::int64_t c = 0; c < cols; ++c) S_r[c] = mods.Score(t.diagonal[r], j0 + c, slope, S_r[c]);
        }
        x.alpha[r] = OnlineSoftmax(S_r, cols, &x.m[hk * R + r], &x.l[hk * R + r]);
      }
      // Õ += P̃ V_j, leaving out the keys a row does not see when V_j is not all finite
      if (widen) {
        if (!block_seen_whole && HasNonFiniteRow(V_wide, cols, d)) {
          AccumulateSeenKeys(mods, t.diagonal, R, j0, S_h, x.alpha, V_wide, cols, d, O_h, d_pad);
        } else {
          AccumulateBlock(S_h, x.alpha, V_wide, R, cols, d_pad, O_h, d_pad);
        }
      } else if (!block_seen_whole && HasNonFiniteRow(V, cols, d)) {
        AccumulateSeenKeys(mods, t.diagonal, R, j0, S_h, x.alpha, V, cols, d, O_h, d_pad);
      } else {
        AccumulateBlock(S_h, x.alpha, V, R, cols, d, O_h, d_pad);
      }
    }
  }
  for (std::int64_t row = 0; row < H * R; ++row) {  // O = Õ / l; a row with l = 0 saw no key: O = 0, LSE = −∞
    const float inv_l = x.l[row] == 0.0f ? 0.0f : 1.0f / x.l[row];
    for (std::int64_t e = 0; e < d; ++e) t.O[row * d + e] = x.O[row * d_pad + e] * inv_l;
    t.lse[row] = x.l[row] == 0.0f ? kNegInf : x.m[row] + std::log(x.l[row]);
  }
}

void AttendChunkImpl(const ChunkTask& task, float* scratch) {
  switch (task.dtype) {
    case DType::kF32: return AttendChunkT<float>(task, scratch);
    case DType::kF16: return AttendChunkT<hwy::float16_t>(task, scratch);
    case DType::kBF16: return AttendChunkT<hwy::bfloat16_t>(task, scratch);
  }
}

}  // namespace flashattn::decoding::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashattn::decoding {

HWY_EXPORT(AttendChunkImpl);

namespace {
constexpr std::int64_t kAlignFloats = 16;  // 64 bytes
constexpr std::int64_t kMaxLanes = 64;     // floats in the widest vector any target may have
std::int64_t RoundUp(std::int64_t x, std::int64_t multiple) { return (x + multiple - 1) / multiple * multiple; }
}  // namespace

std::int64_t AttendScratch::Floats(std::int64_t heads, std::int64_t R, std::int64_t d) {
  const std::int64_t rows = heads * R, d_max = RoundUp(d, kMaxLanes);
  return kAlignFloats + RoundUp(rows * d_max, kAlignFloats) + 2 * kDecodeBc * d_max +
         RoundUp(rows * kDecodeBc, kAlignFloats) + RoundUp(rows * d_max, kAlignFloats) +
         2 * RoundUp(rows, kAlignFloats) + RoundUp(R, kAlignFloats);
}

AttendScratch AttendScratch::Carve(float* base, std::int64_t heads, std::int64_t R, std::int64_t d) {
  const std::int64_t rows = heads * R, d_max = RoundUp(d, kMaxLanes);
  const auto address = reinterpret_cast<std::uintptr_t>(base);
  float* p = base + (RoundUp(static_cast<std::int64_t>(address), 4 * kAlignFloats) -
                     static_cast<std::int64_t>(address)) / 4;
  AttendScratch x;
  x.Q = p, p += RoundUp(rows * d_max, kAlignFloats);
  x.K = p, p += kDecodeBc * d_max;
  x.V = p, p += kDecodeBc * d_max;
  x.S = p, p += RoundUp(rows * kDecodeBc, kAlignFloats);
  x.O = p, p += RoundUp(rows * d_max, kAlignFloats);
  x.m = p, p += RoundUp(rows, kAlignFloats);
  x.l = p, p += RoundUp(rows, kAlignFloats);
  x.alpha = p;
  return x;
}

void AttendChunk(const ChunkTask& task, float* scratch) {
  HWY_DYNAMIC_DISPATCH(AttendChunkImpl)(task, scratch);
}

}  // namespace flashattn::decoding
#endif  // HWY_ONCE
