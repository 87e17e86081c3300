// The fused backward pass for one element type T, per Highway target (docs/backward.md):
//
//   for each (batch b, K/V head):                                         [all threads]
//     D_i = rowsum(dO_i ∘ O_i), and s·Q_i, dO_i in float32, for the rows of every query head of the group
//     for each K/V block j (static round-robin over threads: the unit of parallel work):
//       K_j, V_j → float32 copies and NR-wide panels;  dK_j = 0, dV_j = 0 (owned by this thread)
//       for each query head h of the group, each Q block i whose band reaches block j (under a block mask: that
//       lists a key block of j, the lists transposed through a table of classes per (b, K/V head)):
//         S_ij = (s·Q_i) K_jᵀ, masks/modifiers         P_ij = exp(S_ij − LSE_i)   (0 for LSE_i = −∞)
//         dP_ij = (dO_i V_jᵀ) ∘ Z_ij                    (Z: dropout multipliers)
//         dS_ij = P_ij ∘ (dP_ij − D_i) [∘ (1 − tanh²) under softcap],   then P̂_ij = P_ij ∘ Z_ij in place
//         dV_j += P̂_ijᵀ dO_i,   dK_j += dS_ijᵀ (s·Q_i),   dQ_i^(thread) += dS_ij K_j
//           (the transposed products read P̂_ij and dS_ij as stored: ALayout::kTransposed)
//       write dK_j, dV_j once
//     dQ = s·Σ_thread dQ^(thread), summed in thread order, written once
//   with attention sinks: dsink_h = −Σ_{b,i} e^{s_h − LSE_i}·D_i, from the D_i above, summed in row order
//   (the sink's P_i,sink = e^{s_h − LSE_i} has no value: its dP is 0 and its dS is P_i,sink·(0 − D_i)); P_ij
//   needs nothing new, as the LSE already counts the sink
//
// A pair (i, j) that row i does not see (band, boolean mask), or of a row that saw no key (LSE_i = −∞),
// contributes nothing, not even 0·NaN (docs/robustness.md). With finite operands its P_ij and dS_ij are 0 and the
// products above are exact; a tile that hides some pair and holds an inf or NaN in Q_i, dO_i, D_i, K_j or
// V_j sums over the pairs its rows see instead (AccumulateSeenPairs).
//
// No atomics: each thread accumulates dQ in a partial buffer of its own (group·Nq·d floats), and the
// assignment of K/V blocks to threads and the order of every sum depend only on the thread count, so
// repeated calls are bitwise identical. Extra memory per K/V head: D, s·Q and dO in float32
// (group·Nq·(1 + d + dv)) and the partials (threads·group·Nq·d), plus per-thread tiles; never Nq×Nk.
//
// Traffic per K/V head in main memory, with Tc = ⌈Nk/Bc⌉: K, V, Q, dO, O read and dK, dV written once; the
// float32 s·Q, dO and LSE, D read once per K/V block (Tc·group·Nq·(d + dv + 2)); the dQ partial read and
// written once per tile. The float32 copies are contiguous rows: in a (batch, seq, head, dim) layout a
// tile's Q rows lie heads·d apart, and gathering them per tile was slower (docs/performance.md).
#if defined(FLASHATTN_BACKWARD_BACKWARD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_BACKWARD_BACKWARD_INL_H_
#undef FLASHATTN_BACKWARD_BACKWARD_INL_H_
#else
#define FLASHATTN_BACKWARD_BACKWARD_INL_H_
#endif

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backward/backward.h"
#include "common/constants.h"
#include "common/dropout.h"
#include "common/element.h"
#include "common/score.h"
#include "flashattn/backward.h"
#include "hwy/highway.h"
#include "simd/convert-inl.h"
#include "simd/exp-inl.h"
#include "simd/geometry.h"
#include "simd/packing-inl.h"
#include "simd/register_tiles-inl.h"
#include "simd/scratch.h"
#include "simd/score_modifiers-inl.h"
#include "simd/seen_pairs-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE::backward_kernel {
using simd::Geometry;

// One thread's fast-memory working set, all float32.
struct Scratch {
  float* K_j;    // Bc × d_pad
  float* K_sl;   // K_j in column slices (BLayout::kSlices), the B of dQ_i += dS K_j
  float* V_j;    // Bc × dv_pad
  float* K_pan;  // K_j as panels: Bc_pad × d
  float* V_pan;  // V_j as panels: Bc_pad × dv
  float* dK_j;   // Bc × d_pad
  float* dV_j;   // Bc × dv_pad
  float* S;      // Br × Bc_pad: S_ij, then P_ij, then P̂_ij
  float* S_raw;  // Br × Bc_pad: s·q·k before softcap (only with softcap)
  float* dP;     // Br × Bc_pad: dP_ij, then dS_ij
  float* Z;      // Bc_pad dropout multipliers of one row

  // The regions of one thread's share (S_raw empty without softcap).
  static Scratch Carve(simd::ScratchCarver& c, const Geometry& g) {
    const std::int64_t tile = g.Br * g.Bc_pad;
    Scratch x;
    x.K_j = c.Take<float>(g.Bc_pad * g.d_pad);
    x.K_sl = c.Take<float>(g.Bc_pad * g.d_pad);
    x.V_j = c.Take<float>(g.Bc_pad * g.dv_pad);
    x.K_pan = c.Take<float>(g.Bc_pad * g.d);
    x.V_pan = c.Take<float>(g.Bc_pad * g.dv);
    x.dK_j = c.Take<float>(g.Bc_pad * g.d_pad);
    x.dV_j = c.Take<float>(g.Bc_pad * g.dv_pad);
    x.S = c.Take<float>(tile);
    x.S_raw = c.Take<float>(g.softcap > 0.0f ? tile : 0);
    x.dP = c.Take<float>(tile);
    x.Z = c.Take<float>(g.Bc_pad);
    return x;
  }
};

// The query-side rows of one query head (or, from BackwardT, of a group's heads one after another), in
// float32 once per call rather than once per K/V block: s·Q (Nq × d_pad), dO (Nq × dv_pad), D (Nq).
struct HeadRows {
  const float* Q;
  const float* dO;
  const float* D;
};

// D_i = dO_i · O_i for every row of the group's query heads: D[hg·Nq + i].
template <typename T>
void RowDotDoO(const BackwardParams& bp, const Geometry& g, std::int64_t b, std::int64_t h, std::int64_t i,
               float* D) {
  const AttentionParams& p = bp.attention;
  const T* dO = RowOf<T>(bp.d_o, bp.do_strides, b, h, i);
  const T* O = RowOf<T>(p.o, p.o_strides, b, h, i);
  // Sequential, like the dP_ij = dO_i·v_j of ProductABt it is subtracted from: with one key (O = v) the
  // two must cancel to within float32 rounding (a vector sum left 1.4e-6 in dQ at d = 256).
  float sum = 0.0f;
  for (std::int64_t e = 0; e < g.dv; ++e) sum += ToF32(dO[e]) * ToF32(O[e]);
  *D = sum;
}

// One tile: query rows [i0, i0 + rows) of head h (its rows of s·Q, dO and D in `head`) against the K/V block
// at j0 (cols keys) held in x; `kv_non_finite` says whether K_j or V_j holds an inf or a NaN.
template <typename T>
void BackwardTile(const BackwardParams& bp, const Geometry& g, const ScoreModifiers& mods,
                  const Dropout& dropout, const Scratch& x, std::int64_t b, std::int64_t h,
                  std::int64_t i0, std::int64_t rows, std::int64_t j0, std::int64_t cols, bool kv_non_finite,
                  const HeadRows& head, float* dQ_head) {
  const AttentionParams& p = bp.attention;
  const DF df;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(df));
  const std::int64_t lds = g.Bc_pad;
  const float* Q_i = head.Q + i0 * g.d_pad;      // s·Q_i
  const float* dO_i = head.dO + i0 * g.dv_pad;
  const float* D_i = head.D + i0;
  const float* lse_i = p.lse + (b * g.Hq + h) * g.Nq + i0;  // finite or −∞ (validated)
  const bool row_without_keys = std::any_of(lse_i, lse_i + rows, [](float lse) { return lse == kNegInf; });

  // S_ij = (s·Q_i) K_jᵀ, then softcap, ALiBi, masks where the tile needs them.
  ProductABt(Q_i, g.d_pad, rows, x.K_pan, g.Bc_pad, g.d, x.S, lds);
  if (g.softcap > 0.0f) std::copy(x.S, x.S + rows * lds, x.S_raw);
  if (mods.TileNeedsModifiers(i0, i0 + rows, j0, j0 + cols)) {
    ApplyScoreModifiers(mods, i0, rows, j0, cols, x.S, lds);
  }
  // P_ij = exp(S_ij − LSE_i); keys past `cols` and rows that saw no key give 0.
  for (std::int64_t r = 0; r < rows; ++r) {
    float* P_r = x.S + r * lds;
    if (lse_i[r] == kNegInf) {
      std::fill(P_r, P_r + lds, 0.0f);
      continue;
    }
    const VF lse = hn::Set(df, lse_i[r]);
    for (std::int64_t c = 0; c < lds; c += L) {
      hn::StoreU(flashattn::HWY_NAMESPACE::Exp(df, hn::Sub(hn::LoadU(df, P_r + c), lse)), df, P_r + c);
    }
    std::fill(P_r + cols, P_r + lds, 0.0f);
  }
  // dP_ij = dO_i V_jᵀ ∘ Z_ij;  dS_ij = P_ij (dP_ij − D_i) cap'_ij;  then P̂_ij = P_ij ∘ Z_ij.
  ProductABt(dO_i, g.dv_pad, rows, x.V_pan, g.Bc_pad, g.dv, x.dP, lds);
  for (std::int64_t r = 0; r < rows; ++r) {
    float* P_r = x.S + r * lds;
    float* dS_r = x.dP + r * lds;
    if (dropout.Active()) {
      dropout.RowMultipliers(b, h, i0 + r, j0, cols, x.Z);
      for (std::int64_t c = 0; c < cols; ++c) dS_r[c] *= x.Z[c];
    }
    const VF D = hn::Set(df, D_i[r]);
    for (std::int64_t c = 0; c < lds; c += L) {
      hn::StoreU(hn::Mul(hn::LoadU(df, P_r + c), hn::Sub(hn::LoadU(df, dS_r + c), D)), df, dS_r + c);
    }
    if (g.softcap > 0.0f) {  // cap' = 1 − tanh²(s·q·k / c)
      const VF inv_cap = hn::Set(df, 1.0f / g.softcap), one = hn::Set(df, 1.0f);
      const float* raw = x.S_raw + r * lds;
      for (std::int64_t c = 0; c < lds; c += L) {
        const VF t = SoftcapTanh(df, hn::Mul(hn::LoadU(df, raw + c), inv_cap));
        hn::StoreU(hn::Mul(hn::LoadU(df, dS_r + c), hn::NegMulAdd(t, t, one)), df, dS_r + c);
      }
    }
    if (dropout.Active()) {
      for (std::int64_t c = 0; c < cols; ++c) P_r[c] *= x.Z[c];
    }
  }
  // With finite operands a hidden pair's P_ij and dS_ij are 0 and add exact zeros below. A tile that hides
  // some pair and holds an inf or NaN (Q_i, dO_i, D_i, K_j, V_j) may have NaN there, or 0 times a NaN
  // operand: it sums over the pairs its rows see only. The check runs once per tile that hides some pair.
  const bool hides_pairs = row_without_keys || mods.TileMayHideKeys(i0, i0 + rows, j0, j0 + cols);
  if (hides_pairs && (kv_non_finite || HasNonFinite(Q_i, rows * g.d_pad) ||
                      HasNonFinite(dO_i, rows * g.dv_pad) ||
                      std::any_of(D_i, D_i + rows, [](float D_r) { return !std::isfinite(D_r); }))) {
    const auto seen = [&](std::int64_t r, std::int64_t c) {
      return lse_i[r] != kNegInf && mods.Sees(i0 + r, j0 + c);
    };
    const auto seen_t = [&](std::int64_t c, std::int64_t r) { return seen(r, c); };
    const auto dO_at = [&](std::int64_t r, std::int64_t e) { return dO_i + r * g.dv_pad + e; };
    const auto Q_at = [&](std::int64_t r, std::int64_t e) { return Q_i + r * g.d_pad + e; };
    const auto K_at = [&](std::int64_t c, std::int64_t e) { return x.K_j + c * g.d_pad + e; };
    AccumulateSeenPairs<ALayout::kTransposed>(x.S, lds, cols, rows, dO_at, g.dv_pad, x.dV_j, g.dv_pad, nullptr,
                                              seen_t);
    AccumulateSeenPairs<ALayout::kTransposed>(x.dP, lds, cols, rows, Q_at, g.d_pad, x.dK_j, g.d_pad, nullptr,
                                              seen_t);
    AccumulateSeenPairs<ALayout::kRowMajor>(x.dP, lds, rows, cols, K_at, g.d_pad, dQ_head + i0 * g.d_pad,
                                            g.d_pad, nullptr, seen);
    return;
  }
  // dV_j += P̂ᵀ dO_i,  dK_j += dSᵀ (s·Q_i),  dQ_i += dS K_j
  AccumulateAB<ALayout::kTransposed>(x.S, lds, cols, rows, dO_i, g.dv_pad, g.dv_pad, x.dV_j, g.dv_pad);
  AccumulateAB<ALayout::kTransposed>(x.dP, lds, cols, rows, Q_i, g.d_pad, g.d_pad, x.dK_j, g.d_pad);
  AccumulateAB<ALayout::kRowMajor, BLayout::kSlices>(x.dP, lds, rows, cols, x.K_sl, cols, g.d_pad,
                                                      dQ_head + i0 * g.d_pad, g.d_pad);
}

// The bytes of one query head's table of block classes: every query block against every key block (0 without
// a block mask).
inline std::int64_t ClassTableBytes(const AttentionParams& p) {
  const BlockLists lists(p, 0, 0);
  return lists.Tq * lists.Tk;
}

// Calls visit(i0) for the Q blocks that see keys [j0, j1), in ascending order: those whose band reaches
// them, or under a block mask those whose query blocks list a key block they meet (the transposed lists, read
// from the table of classes; partial blocks only where the band reaches: ScoreModifiers::VisitsTile).
template <class Visit>
void ForEachQBlock(const ScoreModifiers& mods, const Geometry& g, std::int64_t j0, std::int64_t j1, Visit visit) {
  if (mods.BlockSparse()) {
    for (std::int64_t i0 = 0; i0 < g.Nq; i0 += g.Br) {
      if (mods.VisitsTile(i0, std::min(g.Nq, i0 + g.Br), j0, j1)) visit(i0);
    }
    return;
  }
  const IndexRange reach = mods.RowsOfKeys(j0, j1, g.Nq);
  for (std::int64_t i0 = reach.begin / g.Br * g.Br; reach.begin < reach.end && i0 < reach.end; i0 += g.Br) visit(i0);
}

// K/V block jt of (b, hkv): every tile that reaches it, then dK_j and dV_j written once. `classes`: the
// block mask's table of classes of every query block, per query head of the group (unused without one).
template <typename T>
void BackwardKvBlock(const BackwardParams& bp, const Geometry& g, const Dropout& dropout,
                     const Scratch& x, std::int64_t b, std::int64_t hkv, std::int64_t jt,
                     const HeadRows& group, const std::uint8_t* classes, float* dQ_partial) {
  const AttentionParams& p = bp.attention;
  const std::int64_t j0 = jt * g.Bc, cols = std::min(g.Bc, g.Nk - j0);
  std::fill(x.dK_j, x.dK_j + cols * g.d_pad, 0.0f);
  std::fill(x.dV_j, x.dV_j + cols * g.dv_pad, 0.0f);
  // K_j and V_j in float32 and packed, before the first tile that reads them (a K/V block that no Q block
  // visits under a block mask only writes its zero dK_j, dV_j).
  bool loaded = false, kv_non_finite = false;
  const auto load = [&] {
    for (std::int64_t c = 0; c < cols; ++c) {
      WidenRow(RowOf<T>(p.k, p.k_strides, b, hkv, j0 + c), g.d, g.d_pad, x.K_j + c * g.d_pad);
      WidenRow(RowOf<T>(p.v, p.v_strides, b, hkv, j0 + c), g.dv, g.dv_pad, x.V_j + c * g.dv_pad);
    }
    PackPanels(x.K_j, g.d_pad, cols, g.d, g.Bc_pad, x.K_pan);
    PackSlices(x.K_j, g.d_pad, cols, g.d_pad, g.d_pad, x.K_sl);
    PackPanels(x.V_j, g.dv_pad, cols, g.dv, g.Bc_pad, x.V_pan);
    kv_non_finite = HasNonFinite(x.K_j, cols * g.d_pad) || HasNonFinite(x.V_j, cols * g.dv_pad);
    loaded = true;
  };
  for (std::int64_t hg = 0; hg < g.group; ++hg) {
    const std::int64_t h = hkv * g.group + hg;
    ScoreModifiers mods(p, b, h);
    if (mods.BlockSparse()) mods.UseClasses(classes + hg * ClassTableBytes(p), 0);
    const HeadRows head{group.Q + hg * g.Nq * g.d_pad, group.dO + hg * g.Nq * g.dv_pad, group.D + hg * g.Nq};
    ForEachQBlock(mods, g, j0, j0 + cols, [&](std::int64_t i0) {
      if (!loaded) load();
      BackwardTile<T>(bp, g, mods, dropout, x, b, h, i0, std::min(g.Br, g.Nq - i0), j0, cols, kv_non_finite,
                      head, dQ_partial + hg * g.Nq * g.d_pad);
    });
  }
  for (std::int64_t c = 0; c < cols; ++c) {
    T* dK = RowOf<T>(bp.dk, bp.dk_strides, b, hkv, j0 + c);
    T* dV = RowOf<T>(bp.dv, bp.dv_strides, b, hkv, j0 + c);
    for (std::int64_t e = 0; e < g.d; ++e) dK[e] = FromF32<T>(x.dK_j[c * g.d_pad + e]);
    for (std::int64_t e = 0; e < g.dv; ++e) dV[e] = FromF32<T>(x.dV_j[c * g.dv_pad + e]);
  }
}

// Row i's term of dsink_h: −e^{s_h − LSE_i}·D_i, summed over the group's rows of sequence b into
// sink_sums[b·Hq + h] (float64, in row order: the sum runs over up to batch·Nq rows).
inline void SumSinkGradients(const AttentionParams& p, const Geometry& g, std::int64_t b, std::int64_t hkv,
                             const float* D, double* sink_sums) {
  for (std::int64_t hg = 0; hg < g.group; ++hg) {
    const std::int64_t h = hkv * g.group + hg;
    const double sink = SinkOf(p, h);
    const float* lse = p.lse + (b * g.Hq + h) * g.Nq;
    double sum = 0.0;
    if (sink != kNegInf) {
      for (std::int64_t i = 0; i < g.Nq; ++i) sum -= std::exp(sink - lse[i]) * D[hg * g.Nq + i];
    }
    sink_sums[b * g.Hq + h] = sum;
  }
}

template <typename T>
void BackwardT(const BackwardParams& bp) {
  const AttentionParams& p = bp.attention;
  if (p.batch == 0) {
    if (bp.dsinks != nullptr) std::fill_n(bp.dsinks, p.heads_q, 0.0f);  // overwritten, also without any row
    return;
  }
  const DF df;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(df));
  const auto [Br, Bc] = flashattn::backward_kernel::ChooseBackwardBlocks(p);
  const Geometry g(p, Br, Bc, L);
  const Dropout dropout(p);
  const int threads = p.num_threads > 0 ? p.num_threads : omp_get_max_threads();

  // All memory before any output is written: a failed allocation leaves the caller's arrays untouched.
  const auto carve = [&](simd::ScratchCarver& c) { return Scratch::Carve(c, g); };
  const simd::ScratchArena arena(threads, carve);
  // Each partial a whole number of 64-byte lines, so that no two threads' partials share one.
  const std::int64_t partial = RoundUp(g.group * g.Nq * g.d_pad, simd::kScratchAlignment / sizeof(float));
  const auto dQ_partials = simd::AllocateOrThrow<float>(threads * partial);
  const auto D = simd::AllocateOrThrow<float>(g.group * g.Nq);
  const auto Q_group = simd::AllocateOrThrow<float>(g.group * g.Nq * g.d_pad);
  const auto dO_group = simd::AllocateOrThrow<float>(g.group * g.Nq * g.dv_pad);
  const HeadRows group{Q_group.get(), dO_group.get(), D.get()};
  const bool sink_gradients = bp.dsinks != nullptr;
  const auto sink_sums = simd::AllocateOrThrow<double>(sink_gradients ? p.batch * g.Hq : 0);
  const auto classes = simd::AllocateOrThrow<std::uint8_t>(g.group * ClassTableBytes(p));
  const std::int64_t query_blocks = BlockLists(p, 0, 0).Tq;  // 0 without a block mask

#pragma omp parallel num_threads(threads)
  {
    const int thread = omp_get_thread_num();
    const Scratch x = arena.Share(thread, carve);

    for (std::int64_t b = 0; b < p.batch; ++b) {
      for (std::int64_t hkv = 0; hkv < g.Hkv; ++hkv) {
#pragma omp for schedule(static)
        for (std::int64_t t = 0; t < threads; ++t)
          std::fill_n(dQ_partials.get() + t * partial, partial, 0.0f);
        // Per row of the group's heads: D_i, and s·Q_i, dO_i in float32 for every tile that reads them.
#pragma omp for schedule(static)
        for (std::int64_t n = 0; n < g.group * g.Nq; ++n) {
          const std::int64_t h = hkv * g.group + n / g.Nq, i = n % g.Nq;
          RowDotDoO<T>(bp, g, b, h, i, D.get() + n);
          WidenScaledRow(RowOf<T>(p.q, p.q_strides, b, h, i), g.d, g.d_pad, g.scale, Q_group.get() + n * g.d_pad);
          WidenRow(RowOf<T>(bp.d_o, bp.do_strides, b, h, i), g.dv, g.dv_pad, dO_group.get() + n * g.dv_pad);
        }
        // The block mask's classes of the group's heads, one query block per work item.
#pragma omp for schedule(static)
        for (std::int64_t n = 0; n < g.group * query_blocks; ++n) {
          const BlockLists lists(p, b, hkv * g.group + n / query_blocks);
          lists.FillClasses(n % query_blocks, 1, classes.get() + n * lists.Tk);
        }
        if (sink_gradients) {
#pragma omp single
          SumSinkGradients(p, g, b, hkv, D.get(), sink_sums.get());
        }
        // The K/V blocks in snake order over the team: item k goes to thread k mod T and is block
        // r·T + (k mod T) in even rounds r = k div T, r·T + T − 1 − (k mod T) in odd ones, so that under a
        // causal mask (work falling linearly with the block index) every thread gets the same share. The
        // assignment depends only on the team size: the sums into each thread's dQ partial happen in a fixed
        // order.
        const std::int64_t team = omp_get_num_threads();
#pragma omp for schedule(static, 1)
        for (std::int64_t k = 0; k < RoundUp(g.Tc, team); ++k) {
          const std::int64_t round = k / team, pos = k % team;
          const std::int64_t jt = round * team + (round % 2 == 0 ? pos : team - 1 - pos);
          if (jt < g.Tc)
            BackwardKvBlock<T>(bp, g, dropout, x, b, hkv, jt, group, classes.get(),
                               dQ_partials.get() + thread * partial);
        }
        // dQ = s·Σ_t dQ^(t), in thread order, a vector at a time into thread 0's partial row (each row is
        // summed by one thread and read by no other), then written in T.
#pragma omp for schedule(static)
        for (std::int64_t n = 0; n < g.group * g.Nq; ++n) {
          const std::int64_t h = hkv * g.group + n / g.Nq, i = n % g.Nq;
          T* dQ = RowOf<T>(bp.dq, bp.dq_strides, b, h, i);
          float* sum = dQ_partials.get() + n * g.d_pad;
          const VF scale = hn::Set(df, g.scale);
          for (std::int64_t e = 0; e < g.d_pad; e += L) {
            VF total = hn::Zero(df);  // 0 + dQ^(0) + …: a −0 partial sums to +0, as in scalar code
            for (std::int64_t t = 0; t < threads; ++t) {
              total = hn::Add(total, hn::Load(df, dQ_partials.get() + t * partial + n * g.d_pad + e));
            }
            hn::Store(hn::Mul(scale, total), df, sum + e);
          }
          for (std::int64_t e = 0; e < g.d; ++e) dQ[e] = FromF32<T>(sum[e]);
        }
      }
    }
  }
  if (!sink_gradients) return;
  for (std::int64_t h = 0; h < g.Hq; ++h) {  // dsink_h = Σ_b, in batch order
    double total = 0.0;
    for (std::int64_t b = 0; b < p.batch; ++b) total += sink_sums.get()[b * g.Hq + h];
    bp.dsinks[h] = static_cast<float>(total);
  }
}

}  // namespace flashattn::HWY_NAMESPACE::backward_kernel
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_BACKWARD_BACKWARD_KERNEL_INL_H_
