// AttendChunk per Highway target: FlashAttention-2's inner loop over blocks of Bc keys, for the R query
// rows that share one K/V head, head after head within each block (SPEC §3):
//   S_j = Score(Q K_jᵀ)                                 R×Bc, ScoreBlock
//   m_new = max(m, rowmax S_j),  P̃_j = e^{S_j − m_new}   OnlineSoftmax
//   l = e^{m − m_new} l + rowsum P̃_j,  Õ = e^{m − m_new} Õ + P̃_j V_j   (AccumulatePV)
//   O = Õ / l,  LSE = m + log l                          NormalizeAndLse
// float16/bfloat16 K and V are widened to float32 as they are loaded; each K or V row is loaded from
// memory once per block and reused from L1 by every group of kRows query rows. The rows of the unit two
// (block, head) units ahead are prefetched while a unit is computed, and blocks that no mask or modifier
// touches are scaled with vectors (measured on one thread, f16 32k×8 heads, per CPU time on the loaded
// machine: 4.0–4.3 → 5.3–5.7 GB/s; f32 5.1–5.4 → 6.1–6.3 GB/s).
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
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::decoding::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

inline constexpr std::int64_t kBc = kDecodeBc;
inline constexpr std::int64_t kRows = 4;  // query rows per register group (4 accumulators + operands)

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

// dots[r] = Q_r · k and dots[kRows + r] = Q_r · k1 for rows [0, n) of Q (n is 1 or kRows), one pass over
// two keys. Two keys give 2·n independent FMA chains (8 for n = 4), enough to cover the FMA latency; the
// accumulators are named variables, not an array, so that they stay in registers.
template <std::int64_t n, typename T>
HWY_INLINE void DotRows(const float* Q, std::int64_t d, const T* k, const T* k1, float* dots) {
  static_assert(n == 1 || n == kRows);
  const DF df;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  VF a0 = hn::Zero(df), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
  std::int64_t e = 0;
  for (; e + N <= d; e += N) {
    const VF k_e = LoadF32(df, k + e), k1_e = LoadF32(df, k1 + e);
    const VF q0 = hn::LoadU(df, Q + e);
    a0 = hn::MulAdd(q0, k_e, a0);
    b0 = hn::MulAdd(q0, k1_e, b0);
    if constexpr (n == kRows) {
      const VF q1 = hn::LoadU(df, Q + d + e), q2 = hn::LoadU(df, Q + 2 * d + e),
               q3 = hn::LoadU(df, Q + 3 * d + e);
      a1 = hn::MulAdd(q1, k_e, a1);
      b1 = hn::MulAdd(q1, k1_e, b1);
      a2 = hn::MulAdd(q2, k_e, a2);
      b2 = hn::MulAdd(q2, k1_e, b2);
      a3 = hn::MulAdd(q3, k_e, a3);
      b3 = hn::MulAdd(q3, k1_e, b3);
    }
  }
  const VF acc[2 * kRows] = {a0, a1, a2, a3, b0, b1, b2, b3};
  for (std::int64_t r = 0; r < n; ++r) {
    float dot = hn::GetLane(hn::SumOfLanes(df, acc[r]));
    float dot1 = hn::GetLane(hn::SumOfLanes(df, acc[kRows + r]));
    for (std::int64_t t = e; t < d; ++t) {
      dot += Q[r * d + t] * ScalarF32(k[t]);
      dot1 += Q[r * d + t] * ScalarF32(k1[t]);
    }
    dots[r] = dot;
    dots[kRows + r] = dot1;
  }
}

// Õ_r += Σ_c P̃[r][c] V_c for rows [0, n) (n is 1 or kRows), each V row chunk loaded once for all n rows.
// Two feature chunks at a time give 2·n independent FMA chains.
template <std::int64_t n, typename T>
HWY_INLINE void AccumulatePV(const float* P, std::int64_t cols, const T* const* V, std::int64_t d, float* O) {
  static_assert(n == 1 || n == kRows);
  const DF df;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  std::int64_t e = 0;
  for (; e + 2 * N <= d; e += 2 * N) {
    VF o0 = hn::LoadU(df, O + e), o1 = o0, o2 = o0, o3 = o0;
    VF u0 = hn::LoadU(df, O + e + N), u1 = u0, u2 = u0, u3 = u0;
    if constexpr (n == kRows) {
      o1 = hn::LoadU(df, O + d + e), u1 = hn::LoadU(df, O + d + e + N);
      o2 = hn::LoadU(df, O + 2 * d + e), u2 = hn::LoadU(df, O + 2 * d + e + N);
      o3 = hn::LoadU(df, O + 3 * d + e), u3 = hn::LoadU(df, O + 3 * d + e + N);
    }
    for (std::int64_t c = 0; c < cols; ++c) {
      const VF v_c = LoadF32(df, V[c] + e), w_c = LoadF32(df, V[c] + e + N);
      const VF p0 = hn::Set(df, P[c]);
      o0 = hn::MulAdd(p0, v_c, o0);
      u0 = hn::MulAdd(p0, w_c, u0);
      if constexpr (n == kRows) {
        const VF p1 = hn::Set(df, P[kBc + c]), p2 = hn::Set(df, P[2 * kBc + c]);
        const VF p3 = hn::Set(df, P[3 * kBc + c]);
        o1 = hn::MulAdd(p1, v_c, o1);
        u1 = hn::MulAdd(p1, w_c, u1);
        o2 = hn::MulAdd(p2, v_c, o2);
        u2 = hn::MulAdd(p2, w_c, u2);
        o3 = hn::MulAdd(p3, v_c, o3);
        u3 = hn::MulAdd(p3, w_c, u3);
      }
    }
    hn::StoreU(o0, df, O + e), hn::StoreU(u0, df, O + e + N);
    if constexpr (n == kRows) {
      hn::StoreU(o1, df, O + d + e), hn::StoreU(u1, df, O + d + e + N);
      hn::StoreU(o2, df, O + 2 * d + e), hn::StoreU(u2, df, O + 2 * d + e + N);
      hn::StoreU(o3, df, O + 3 * d + e), hn::StoreU(u3, df, O + 3 * d + e + N);
    }
  }
  for (; e + N <= d; e += N) {  // one remaining chunk
    for (std::int64_t r = 0; r < n; ++r) {
      VF o_r = hn::LoadU(df, O + r * d + e);
      for (std::int64_t c = 0; c < cols; ++c) {
        o_r = hn::MulAdd(hn::Set(df, P[r * kBc + c]), LoadF32(df, V[c] + e), o_r);
      }
      hn::StoreU(o_r, df, O + r * d + e);
    }
  }
  for (; e < d; ++e)
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t c = 0; c < cols; ++c) O[r * d + e] += P[r * kBc + c] * ScalarF32(V[c][e]);
}

// Applies f<n>(first row) to rows [0, R) in groups of kRows, then the remainder one row at a time.
template <typename F>
HWY_INLINE void ForRowGroups(std::int64_t R, F&& f) {
  std::int64_t r = 0;
  for (; r + kRows <= R; r += kRows) f(std::integral_constant<std::int64_t, kRows>(), r);
  for (; r < R; ++r) f(std::integral_constant<std::int64_t, 1>(), r);
}

// m_new = max(m, rowmax S), P̃ = e^{S − m_new} (in place, −∞ → 0), l = e^{m − m_new} l + rowsum P̃ and
// Õ *= e^{m − m_new}; row of Bc scores, `cols` of them real.
HWY_INLINE void OnlineSoftmax(float* S_r, std::int64_t cols, float* m, float* l, float* O_r, std::int64_t d) {
  const DF df;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  std::fill(S_r + cols, S_r + kBc, kNegInf);
  VF row_max = hn::Set(df, kNegInf);
  for (std::int64_t c = 0; c < kBc; c += N) row_max = hn::Max(row_max, hn::LoadU(df, S_r + c));
  const float m_new = std::max(*m, hn::GetLane(hn::MaxOfLanes(df, row_max)));
  if (m_new == kNegInf) {  // nothing visible yet: P̃ = 0, state unchanged
    std::fill(S_r, S_r + kBc, 0.0f);
    return;
  }
  const VF m_new_v = hn::Set(df, m_new);
  VF row_sum = hn::Zero(df);
  for (std::int64_t c = 0; c < kBc; c += N) {
    const VF P = hn::Exp(df, hn::Sub(hn::LoadU(df, S_r + c), m_new_v));  // e^{−∞} = 0
    hn::StoreU(P, df, S_r + c);
    row_sum = hn::Add(row_sum, P);
  }
  const float rescale = *m == kNegInf ? 0.0f : std::exp(*m - m_new);  // e^{m − m_new}
  *l = rescale * *l + hn::GetLane(hn::SumOfLanes(df, row_sum));
  if (rescale != 1.0f)
    for (std::int64_t e = 0; e < d; ++e) O_r[e] *= rescale;
  *m = m_new;
}

// S_j ← s·S_j for the first `cols` scores of a row (the scores of a block no mask or modifier touches).
HWY_INLINE void ScaleRow(float* S_r, std::int64_t cols, float scale) {
  const DF df;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  const VF s = hn::Set(df, scale);
  std::int64_t c = 0;
  for (; c + N <= cols; c += N) hn::StoreU(hn::Mul(hn::LoadU(df, S_r + c), s), df, S_r + c);
  for (; c < cols; ++c) S_r[c] *= scale;
}

// Element offset of key j's row (K/V head 0) in its sequence's cache: contiguous, or through the pages.
HWY_INLINE std::int64_t KeyOffset(const KvSource& kv, std::int64_t j) {
  if (kv.page_size == 0) return j * kv.seq_stride;
  return kv.pages[j / kv.page_size] * kv.page_stride + (j % kv.page_size) * kv.seq_stride;
}

template <typename T>
void AttendChunkT(const ChunkTask& t, float* scratch) {
  const std::int64_t H = t.heads, R = t.R, d = t.d;
  float* S = scratch;          // per head: R×Bc scores, then P̃
  float* m = S + H * R * kBc;  // running max per (head, row)
  float* l = m + H * R;        // running sum per (head, row)
  std::fill(m, m + H * R, -std::numeric_limits<float>::infinity());
  std::fill(l, l + H * R, 0.0f);
  std::fill(t.O, t.O + H * R * d, 0.0f);
  std::int64_t offset[kBc];  // element offsets of the block's key rows (K/V head 0)
  const T* K[kBc];
  const T* V[kBc];
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
  // later (2, or the next block when there is one head) are requested, a few per key pair, so that the
  // cache is streamed at the memory's pace rather than at the pace of demand misses.
  std::int64_t next_offset[kBc];
  const std::int64_t ahead = H >= 2 ? 2 : 1;
  const std::int64_t row_bytes = d * static_cast<std::int64_t>(sizeof(T));

  for (std::int64_t j0 = t.j_begin; j0 < t.j_end; j0 += kBc) {
    const std::int64_t cols = std::min(kBc, t.j_end - j0);
    const std::int64_t next_cols = std::clamp<std::int64_t>(t.j_end - j0 - kBc, 0, kBc);
    for (std::int64_t c = 0; c < cols; ++c) offset[c] = KeyOffset(kv, j0 + c);  // through the pages if paged
    for (std::int64_t c = 0; c < next_cols; ++c) next_offset[c] = KeyOffset(kv, j0 + kBc + c);
    const bool full_block =  // every row sees every key of the block: the window covers [j0, j0 + cols)
        plain_mods && t.mods.Visible(diag_max, j0) && t.mods.Visible(diag_min, j0 + cols - 1);
    for (std::int64_t hk = 0; hk < H; ++hk) {
      for (std::int64_t c = 0; c < cols; ++c) {
        K[c] = k_base + hk * t.head_stride + offset[c];
        V[c] = v_base + hk * t.head_stride + offset[c];
      }
      // The unit to prefetch: head hk + ahead of this block, or of the next block past the last head.
      const bool same_block = hk + ahead < H;
      const std::int64_t pf_head = same_block ? hk + ahead : hk + ahead - H;
      const std::int64_t pf_cols = same_block ? cols : next_cols;
      const std::int64_t* pf_offset = same_block ? offset : next_offset;
      const float* Q = t.Q + hk * R * d;
      float* S_h = S + hk * R * kBc;
      float* O_h = t.O + hk * R * d;
      // S = Q K_jᵀ, then the score modifiers and masks
      for (std::int64_t c = 0; c < cols; c += 2) {  // keys c and c + 1 (c again when it is the last)
        for (std::int64_t pc = c; pc < std::min(c + 2, pf_cols); ++pc) {
          const T* k_row = k_base + pf_head * t.head_stride + pf_offset[pc];
          const T* v_row = v_base + pf_head * t.head_stride + pf_offset[pc];
          for (std::int64_t byte = 0; byte < row_bytes; byte += 64) {
            hwy::Prefetch(reinterpret_cast<const char*>(k_row) + byte);
            hwy::Prefetch(reinterpret_cast<const char*>(v_row) + byte);
          }
        }
        const bool pair = c + 1 < cols;
        ForRowGroups(R, [&](auto n, std::int64_t r0) {
          float dots[2 * kRows];
          DotRows<decltype(n)::value>(Q + r0 * d, d, K[c], K[pair ? c + 1 : c], dots);
          for (std::int64_t r = 0; r < n; ++r) {
            S_h[(r0 + r) * kBc + c] = dots[r];
            if (pair) S_h[(r0 + r) * kBc + c + 1] = dots[kRows + r];
          }
        });
      }
      for (std::int64_t r = 0; r < R; ++r) {
        float* S_r = S_h + r * kBc;
        if (full_block) {
          ScaleRow(S_r, cols, t.mods.scale);
        } else {
          const float slope = t.slope[hk * R + r];
          for (std::int64_t c = 0; c < cols; ++c) S_r[c] = t.mods.Score(t.diagonal[r], j0 + c, slope, S_r[c]);
        }
        OnlineSoftmax(S_r, cols, &m[hk * R + r], &l[hk * R + r], O_h + r * d, d);
      }
      ForRowGroups(R, [&](auto n, std::int64_t r0) {
        AccumulatePV<decltype(n)::value>(S_h + r0 * kBc, cols, V, d, O_h + r0 * d);
      });
    }
  }
  for (std::int64_t r = 0; r < H * R; ++r) {  // O = Õ / l; a row with l = 0 saw no key: O = 0, LSE = −∞
    const float inv_l = l[r] == 0.0f ? 0.0f : 1.0f / l[r];
    for (std::int64_t e = 0; e < d; ++e) t.O[r * d + e] *= inv_l;
    t.lse[r] = l[r] == 0.0f ? -std::numeric_limits<float>::infinity() : m[r] + std::log(l[r]);
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

std::int64_t AttendScratchFloats(std::int64_t heads, std::int64_t R) {
  return heads * (R * kDecodeBc + 2 * R);
}

void AttendChunk(const ChunkTask& task, float* scratch) {
  HWY_DYNAMIC_DISPATCH(AttendChunkImpl)(task, scratch);
}

}  // namespace flashattn::decoding
#endif  // HWY_ONCE
