// The fused forward pass for one element type T, per Highway target (see docs/fused_kernel.md):
//
//   for each chunk of (batch, K/V head) pairs:                        [all threads]
//     pack every K_j (NR-wide panels) and V_j (column slices) of the chunk (under a block mask those some Q
//     block visits), once, shared; float16/bfloat16
//     widened to float32 here when the Q blocks have more than kMR rows (PacksKvWide)
//     for each (query head of the GQA group, Q block i), largest work first:   [one thread each]
//       Q_i ← s·Q rows (float32),  Õ = 0, (m, l) = (−∞, 0), or (s_h, 1) with an attention sink s_h
//       for each K/V block j that the band of rows i reaches (or that meets a block the block mask lists):
//         S_ij = Q_i K_jᵀ                       (ProductABt, from the packed panels)
//         masks/modifiers, boundary tiles only    (ApplyScoreModifiers)
//         m, l, α, P̃_ij = e^{S_ij − m}          (OnlineSoftmaxRow, on the strip while it is in L1)
//         P̃_ij ∘= Z_ij                           (dropout multipliers, regenerated; l keeps the undropped sum)
//         Õ = diag(α) Õ + P̃_ij V_j              (AccumulateAB, from packed or copied V_j)
//       O_i = Õ / l, LSE_i = m + log l          (NormalizeAndLse), written once
#if defined(FLASHATTN_FORWARD_FORWARD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_FORWARD_FORWARD_INL_H_
#undef FLASHATTN_FORWARD_FORWARD_INL_H_
#else
#define FLASHATTN_FORWARD_FORWARD_INL_H_
#endif

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "common/constants.h"
#include "common/dropout.h"
#include "common/element.h"
#include "common/prefetch.h"
#include "common/score.h"
#include "flashattn/flashattn.h"
#include "forward/forward.h"
#include "hwy/highway.h"
#include "simd/convert-inl.h"
#include "simd/geometry.h"
#include "simd/online_softmax-inl.h"
#include "simd/packing-inl.h"
#include "simd/register_tiles-inl.h"
#include "simd/scratch.h"
#include "simd/score_modifiers-inl.h"
#include "simd/seen_pairs-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE::forward_kernel {
using simd::Geometry;

// One thread's fast-memory working set (P: the packed K and V element type, see PacksKvWide).
template <typename P>
struct Scratch {
  P* V_j;        // Bc × dv_pad, the current V block in column slices, zero-padded (when V is not packed)
  float* Q_i;    // Br × d (Br rounded up to kMR), pre-scaled by s, in row groups of kMR rows
  float* S_ij;   // Br × Bc_pad, scores then P̃
  float* O_i;    // Br × dv_pad, the unnormalized accumulator Õ
  float* m;      // Br running maxima
  float* l;      // Br running sums
  float* alpha;  // Br rescale factors of the current tile
  float* Z;      // Bc_pad dropout multipliers of one row
  ColumnSpan* spans;  // ⌈Br / kMR⌉ per-row-group key spans of a band boundary tile
  std::uint8_t* classes;  // the block mask's classes of the query blocks a Q block meets (BlockLists)

  // The regions of one thread's share (V_j empty when V is packed whole).
  static Scratch Carve(simd::ScratchCarver& c, const Geometry& g, bool pack_v, std::int64_t class_bytes) {
    Scratch x;
    x.Q_i = c.Take<float>(RoundUp(g.Br, kMR) * g.d);
    x.S_ij = c.Take<float>(g.Br * g.Bc_pad);
    x.O_i = c.Take<float>(g.Br * g.dv_pad);
    x.m = c.Take<float>(g.Br);
    x.l = c.Take<float>(g.Br);
    x.alpha = c.Take<float>(g.Br);
    x.Z = c.Take<float>(g.Bc_pad);
    x.V_j = c.Take<P>(pack_v ? 0 : g.Bc * g.dv_pad);
    x.spans = c.Take<ColumnSpan>((g.Br + kMR - 1) / kMR);
    x.classes = c.Take<std::uint8_t>(class_bytes);
    return x;
  }
};

// float16/bfloat16 K and V are widened to float32 as they are packed, once per (batch, K/V head), when a Q
// block has more than one register tile of rows (PacksKvWide): every Q block and query head then reads
// float32 panels, as in a float32 call, instead of converting next to every FMA (AVX-512 converts on the
// FMA ports) or widening each tile once per Q block (docs/performance.md). The caller's K and V are still
// read from memory in their own type. Blocks of at most kMR rows (Nq ≤ kMR) pack them in their own type and
// convert as the micro-kernel loads.
static_assert(kMR == 6, "PacksKvWide (forward.h) states the register tile's rows");

// Asks for `rows` rows of `width` elements (row stride ld) to be brought into L2: the V rows that PackSlices
// reads after the scores of a tile are done. Each row is usually in a page of its own, out of reach of the
// hardware prefetcher.
template <typename T>
HWY_INLINE void PrefetchRows(const T* rows_begin, std::int64_t ld, std::int64_t rows, std::int64_t width) {
  const std::int64_t row_bytes = width * static_cast<std::int64_t>(sizeof(T));
  for (std::int64_t r = 0; r < rows; ++r) PrefetchRowToL2(rows_begin + r * ld, row_bytes);
}

// The `rows` Q rows at Q and O rows at O of a query block into L2, the O rows to be written. They are a row
// stride apart, usually a page each, out of reach of the hardware prefetcher: unrequested, the Q rows' misses
// come a few at a time behind the stores of their copy into Q_i, and each O row's stores wait for its lines to
// be read. That costs as much as the scores of a few key blocks, which a dense query block's many key blocks
// hide and a block mask that visits few does not.
template <typename T>
HWY_INLINE void RequestBlockRows(const T* Q, T* O, const AttentionParams& p, std::int64_t rows, std::int64_t d,
                                 std::int64_t dv) {
  PrefetchRows(Q, p.q_strides.seq, rows, d);
  for (std::int64_t r = 0; r < rows; ++r) {
    PrefetchRowForWriteToL2(O + r * p.o_strides.seq, dv * static_cast<std::int64_t>(sizeof(T)));
  }
}

// Packs block jt of one (batch, K/V head), once for all query blocks and query heads of the group: K into
// panels, and V, when the head is small enough to be packed whole (`packed_v` not null; see SolveAllBlocks),
// into column slices (BLayout::kSlices, zero beyond dv), so that the slice AccumulateAB reads for every row
// group is contiguous. (The caller's rows are often a power of two apart, heads × dv elements, and every
// row in a page of its own.) A longer head copies V_j into slices per tile instead.
template <typename T, typename P>
void PackBlockOfHead(const AttentionParams& p, const Geometry& g, std::int64_t b, std::int64_t hkv,
                     std::int64_t jt, P* packed, P* packed_v) {
  const std::int64_t j0 = jt * g.Bc, cols = std::min(g.Bc, g.Nk - j0);
  const T* K = RowOf<T>(p.k, p.k_strides, b, hkv, j0);
  const T* V = RowOf<T>(p.v, p.v_strides, b, hkv, j0);
  // All rows requested first, for the reason RequestBlockRows gives: the scattered stores of the packing would
  // otherwise keep one row's misses in flight at a time.
  PrefetchRows(K, p.k_strides.seq, cols, g.d);
  if (packed_v != nullptr) PrefetchRows(V, p.v_strides.seq, cols, g.dv);
  PackPanels(K, p.k_strides.seq, cols, g.d, g.Bc_pad, packed + jt * g.Bc_pad * g.d);
  if (packed_v != nullptr) PackSlices(V, p.v_strides.seq, cols, g.dv, g.dv_pad, packed_v + jt * g.Bc * g.dv_pad);
}

// Under a block mask, marks in visited[jt] (Tc entries) the K/V blocks of (batch, K/V head) `head` that meet a
// key block some query block of the group's query heads lists: a superset of those ForEachKeyBlock visits, and
// the only ones packed.
inline void MarkVisitedKvBlocks(const AttentionParams& p, const Geometry& g, std::int64_t head,
                                std::uint8_t* visited) {
  std::fill(visited, visited + g.Tc, std::uint8_t{0});
  const std::int64_t b = head / g.Hkv, hkv = head % g.Hkv;
  const std::int64_t heads = p.block_mask.heads == 1 ? 1 : g.group;  // one list serves the whole group
  for (std::int64_t hg = 0; hg < heads; ++hg) {
    const BlockLists lists(p, b, hkv * g.group + hg);
    for (std::int64_t r = 0; r < lists.Tq; ++r) {
      lists.ForEachListed(r, [&](std::int64_t c, BlockClass) {
        const std::int64_t last = std::min(g.Nk, (c + 1) * lists.Kb) - 1;
        std::fill(visited + c * lists.Kb / g.Bc, visited + last / g.Bc + 1, std::uint8_t{1});
      });
    }
  }
}

// The table of block classes a Q block of Br rows needs: a row of key blocks for each query block it may meet.
inline std::int64_t ClassTableBytes(const AttentionParams& p, const Geometry& g) {
  const BlockLists lists(p, 0, 0);  // Tq = Tk = 0 without a block mask
  return std::min(lists.Tq, (g.Br - 1) / lists.Qb + 2) * lists.Tk;
}

// Calls visit(jt) for the K/V blocks that rows [i0, i0 + rows) visit, in ascending order: those the band
// reaches, or under a block mask those that meet a key block listed for the rows' query blocks (and, for
// partial blocks only, that the band reaches: ScoreModifiers::VisitsTile).
template <class Visit>
void ForEachKeyBlock(const ScoreModifiers& mods, const Geometry& g, std::int64_t i0, std::int64_t rows, Visit visit) {
  if (mods.BlockSparse()) {
    for (std::int64_t jt = 0; jt < g.Tc; ++jt) {
      if (mods.VisitsTile(i0, i0 + rows, jt * g.Bc, std::min(g.Nk, (jt + 1) * g.Bc))) visit(jt);
    }
    return;
  }
  const IndexRange reach = mods.KeysOfRows(i0, i0 + rows, g.Nk);
  for (std::int64_t jt = reach.begin / g.Bc; reach.begin < reach.end && jt * g.Bc < reach.end; ++jt) visit(jt);
}

// Rows [i0, i0 + rows) of query head h: the whole inner loop over K/V blocks, then the one write of O, LSE.
template <typename T, typename P>
void SolveQBlock(const AttentionParams& p, const Geometry& g, const Dropout& dropout, const Scratch<P>& x,
                 std::int64_t b, std::int64_t h, std::int64_t qb, const P* packed, const P* packed_v) {
  const DF df;
  const std::int64_t L = g.L, NR = g.NR, d = g.d, dv = g.dv;
  const std::int64_t i0 = qb * g.Br, rows = std::min(g.Br, g.Nq - i0);
  const std::int64_t hkv = h / g.group;
  ScoreModifiers mods(p, b, h);
  if (mods.BlockSparse()) {  // the classes of the query blocks these rows meet, for fast lookups per tile
    const std::int64_t r0 = i0 / mods.blocks.Qb, r1 = (i0 + rows - 1) / mods.blocks.Qb;
    mods.blocks.FillClasses(r0, r1 - r0 + 1, x.classes);
    mods.UseClasses(x.classes, r0);
  }
  const RowStart start = SoftmaxRowStart(mods.sink);

  const T* Q = RowOf<T>(p.q, p.q_strides, b, h, i0);
  T* O = RowOf<T>(p.o, p.o_strides, b, h, i0);
  RequestBlockRows(Q, O, p, rows, d, dv);
  // Q_i = s·Q rows in float32, in row groups of kMR rows (ALayout::kRowGroups; zero rows pad the last). A
  // group's rows are widened together, then interleaved in address order: the loads of kMR rows are in flight
  // at once, where one row's loads waited behind the element-by-element stores of the row before.
  std::fill(x.Q_i, x.Q_i + RoundUp(rows, kMR) * d, 0.0f);
  for (std::int64_t r0 = 0; r0 < rows; r0 += kMR) {
    alignas(64) float q_rows[kMR][kMaxHeadDim];
    const std::int64_t n = std::min<std::int64_t>(kMR, rows - r0);
    for (std::int64_t k = 0; k < n; ++k) WidenScaledRow(Q + (r0 + k) * p.q_strides.seq, d, d, g.scale, q_rows[k]);
    float* group = x.Q_i + r0 * d;
    for (std::int64_t e = 0; e < d; ++e) {
      for (std::int64_t k = 0; k < n; ++k) group[e * kMR + k] = q_rows[k][e];
    }
  }
  std::fill(x.m, x.m + rows, start.m);
  std::fill(x.l, x.l + rows, start.l);
  std::fill(x.O_i, x.O_i + rows * g.dv_pad, 0.0f);

  const std::int64_t lds = g.Bc_pad;
  ForEachKeyBlock(mods, g, i0, rows, [&](std::int64_t jt) {
    const std::int64_t j0 = jt * g.Bc, cols = std::min(g.Bc, g.Nk - j0), cols_L = RoundUp(cols, L);
    const P* panels = packed + jt * g.Bc_pad * d;
    const T* V = RowOf<T>(p.v, p.v_strides, b, hkv, j0);
    // A tile on the causal/window band's boundary: each row group computes and sums over only the keys
    // its rows may see (the diagonal tiles of a causal mask do half the work); the scores it skips are
    // masked to −∞ below. (Under a block mask only in a tile without full blocks, which ignore the band.)
    const ColumnSpan* spans = nullptr;
    if (!mods.BandCovers(i0, i0 + rows, j0, j0 + cols) &&
        (!mods.BlockSparse() || !mods.BlocksOfTile(i0, i0 + rows, j0, j0 + cols).any_full)) {
      for (std::int64_t r0 = 0; r0 < rows; r0 += kMR) {
        const std::int64_t first = mods.KeysOf(i0 + r0).begin - j0;
        const std::int64_t end = mods.KeysOf(i0 + std::min(rows, r0 + kMR) - 1).end - j0;
        const std::int64_t begin = std::clamp<std::int64_t>(first, 0, cols);
        x.spans[r0 / kMR] = {begin, std::clamp<std::int64_t>(end, begin, cols)};
      }
      spans = x.spans;
    }
    // S_ij = Q_i K_jᵀ. When V is not packed, its rows are prefetched into L2 meanwhile, a panel's worth at
    // a time, for the copy below.
    if (packed_v != nullptr) {
      ProductABt<ALayout::kRowGroups>(x.Q_i, d, rows, panels, RoundUp(cols, NR), d, x.S_ij, lds, spans);
    } else {
      for (std::int64_t p0 = 0; p0 < cols; p0 += NR) {
        PrefetchRows(V + p0 * p.v_strides.seq, p.v_strides.seq, std::min(NR, cols - p0), dv);
        ProductABt<ALayout::kRowGroups>(x.Q_i, d, rows, panels, p0 + NR, d, x.S_ij, lds, spans, p0);
      }
    }
    if (mods.TileNeedsModifiers(i0, i0 + rows, j0, j0 + cols)) {
      ApplyScoreModifiers(mods, i0, rows, j0, cols, x.S_ij, lds);
    }
    for (std::int64_t r = 0; r < rows; ++r) {  // online softmax; keys past `cols` take no part
      float* S_r = x.S_ij + r * lds;
      std::fill(S_r + cols, S_r + cols_L, kNegInf);
      x.alpha[r] = OnlineSoftmaxRow<SumUpdate::kProductThenSum>(S_r, cols_L, x.m[r], x.l[r]);
      if (dropout.Active()) {  // O = (P ∘ Z) V while l, and so the LSE, sums the undropped P̃
        dropout.RowMultipliers(b, h, i0 + r, j0, cols, x.Z);
        for (std::int64_t c = 0; c < cols; ++c) S_r[c] *= x.Z[c];
      }
    }
    // Õ = diag(α) Õ + P̃_ij V_j, leaving out the keys a row does not see when V_j is not all finite
    const P* V_j = packed_v != nullptr ? packed_v + jt * g.Bc * g.dv_pad : x.V_j;
    if (packed_v == nullptr) PackSlices(V, p.v_strides.seq, cols, dv, g.dv_pad, x.V_j);
    if (mods.TileMayHideKeys(i0, i0 + rows, j0, j0 + cols) && HasNonFinite(V_j, cols * g.dv_pad)) {
      const auto V_at = [&](std::int64_t c, std::int64_t e) { return V_j + SliceOffset(cols, g.dv_pad, c, e); };
      const auto seen = [&](std::int64_t r, std::int64_t c) { return mods.Sees(i0 + r, j0 + c); };
      AccumulateSeenPairs<ALayout::kRowMajor>(x.S_ij, lds, rows, cols, V_at, g.dv_pad, x.O_i, g.dv_pad, x.alpha,
                                              seen);
    } else {
      AccumulateAB<ALayout::kRowMajor, BLayout::kSlices>(x.S_ij, lds, rows, cols, V_j, cols, g.dv_pad, x.O_i,
                                                          g.dv_pad, x.alpha, spans);
    }
  });

  float* lse = p.lse == nullptr ? nullptr : p.lse + (b * g.Hq + h) * g.Nq + i0;
  for (std::int64_t r = 0; r < rows; ++r) {
    float* O_r = x.O_i + r * g.dv_pad;
    const float lse_r = NormalizeAndLse(O_r, g.dv_pad, x.m[r], x.l[r]);
    T* out = O + r * p.o_strides.seq;
    std::int64_t e = 0;
    if constexpr (std::is_same_v<T, float>) {
      for (; e + L <= dv; e += L) hn::StoreU(hn::Load(df, O_r + e), df, out + e);
    } else if constexpr (std::is_same_v<T, hwy::float16_t> && kNativeF16Widening) {
      const hn::Rebind<hwy::float16_t, DF> df16;  // the conversion instruction, rounding to nearest even
      for (; e + L <= dv; e += L) hn::StoreU(hn::DemoteTo(df16, hn::Load(df, O_r + e)), df16, out + e);
    }
    for (; e < dv; ++e) out[e] = FromF32<T>(O_r[e]);
    if (lse != nullptr) lse[r] = lse_r;
  }
}

// Packs K and V as P and solves every Q block (all threads).
template <typename T, typename P>
void SolveAllBlocks(const AttentionParams& p, const Geometry& g, const Dropout& dropout) {
  // Several (batch, K/V head) pairs are packed at once when they are small, so that short sequences
  // still give every thread work; one pair at a time when it alone is large. V is packed next to K when
  // both fit the budget; a longer head copies V_j per tile instead, which keeps the scratch of a very long
  // sequence at one packed K.
  constexpr std::int64_t kPackBudgetBytes = 16 << 20;
  const std::int64_t heads = p.batch * g.Hkv;
  const std::int64_t packed_head = g.Tc * g.Bc_pad * g.d;  // elements of packed K per (batch, K/V head)
  const std::int64_t k_head_bytes = packed_head * static_cast<std::int64_t>(sizeof(P));
  const std::int64_t v_head_bytes = g.Tc * g.Bc * g.dv_pad * static_cast<std::int64_t>(sizeof(P));
  const bool pack_v = k_head_bytes + v_head_bytes <= kPackBudgetBytes;
  const std::int64_t packed_v_head = pack_v ? g.Tc * g.Bc * g.dv_pad : 0;  // 0: V_j is copied per tile
  const std::int64_t head_bytes = k_head_bytes + (pack_v ? v_head_bytes : 0);
  const std::int64_t chunk =
      std::clamp<std::int64_t>(kPackBudgetBytes / std::max<std::int64_t>(1, head_bytes), 1, heads);
  // No more threads (and per-thread scratch) than there are work items.
  const std::int64_t items = p.batch * g.Hq * g.Tr;
  const int threads = static_cast<int>(
      std::min<std::int64_t>(items, p.num_threads > 0 ? p.num_threads : omp_get_max_threads()));

  // All memory before any output is written: a failed allocation leaves the caller's arrays untouched.
  const std::int64_t class_bytes = ClassTableBytes(p, g);
  const auto carve = [&](simd::ScratchCarver& c) { return Scratch<P>::Carve(c, g, pack_v, class_bytes); };
  const simd::ScratchArena arena(threads, carve);
  const auto packed = simd::AllocateOrThrow<P>(chunk * packed_head);
  const auto packed_v = simd::AllocateOrThrow<P>(chunk * packed_v_head);
  const bool sparse = p.block_mask.active();  // then only the K/V blocks some Q block visits are packed
  const auto visited = simd::AllocateOrThrow<std::uint8_t>(sparse ? chunk * g.Tc : 0);

#pragma omp parallel num_threads(threads)
  {
    const Scratch<P> x = arena.Share(omp_get_thread_num(), carve);
    for (std::int64_t first = 0; first < heads; first += chunk) {
      const std::int64_t count = std::min(chunk, heads - first);
      if (sparse) {
#pragma omp for schedule(static)
        for (std::int64_t local = 0; local < count; ++local)
          MarkVisitedKvBlocks(p, g, first + local, visited.get() + local * g.Tc);
      }
#pragma omp for schedule(static)
      for (std::int64_t t = 0; t < count * g.Tc; ++t) {
        if (sparse && visited.get()[t] == 0) continue;
        const std::int64_t head = first + t / g.Tc;
        const std::int64_t b = head / g.Hkv, hkv = head % g.Hkv, jt = t % g.Tc;
        PackBlockOfHead<T>(p, g, b, hkv, jt, packed.get() + (t / g.Tc) * packed_head,
                           pack_v ? packed_v.get() + (t / g.Tc) * packed_v_head : nullptr);
      }
      // Work items head by head, so that a head's K and V stay in the shared cache while every Q block
      // reads them; within a head in decreasing Q block order, because under a causal mask the last blocks
      // are the longest and handing them out first balances the dynamic schedule.
      const std::int64_t per_head = g.Tr * g.group;
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t t = 0; t < count * per_head; ++t) {
        const std::int64_t local = t / per_head, head = first + local;
        const std::int64_t qb = g.Tr - 1 - (t % per_head) / g.group;
        const std::int64_t h = (head % g.Hkv) * g.group + t % g.group;
        SolveQBlock<T>(p, g, dropout, x, head / g.Hkv, h, qb, packed.get() + local * packed_head,
                       pack_v ? packed_v.get() + local * packed_v_head : nullptr);
      }
    }
  }
}

template <typename T>
void ForwardT(const AttentionParams& p) {
  if (p.batch == 0 || p.seqlen_q == 0) return;
  const flashattn::forward_kernel::FusedTiling tiling = flashattn::forward_kernel::ChooseFusedTiling(p);
  // A block longer than its sequence is that sequence: the clamp keeps scratch sizes bounded for any
  // requested tiling without changing the computation.
  const std::int64_t Br = std::min(tiling.Br, std::max<std::int64_t>(1, p.seqlen_q));
  const std::int64_t Bc = std::min(tiling.Bc, std::max<std::int64_t>(1, p.seqlen_k));
  const Geometry g(p, Br, Bc, static_cast<std::int64_t>(hn::Lanes(DF())));
  const Dropout dropout(p);
  if (flashattn::forward_kernel::PacksKvWide(p.dtype, g.Br)) {
    SolveAllBlocks<T, float>(p, g, dropout);
  } else {
    SolveAllBlocks<T, T>(p, g, dropout);
  }
}

}  // namespace flashattn::HWY_NAMESPACE::forward_kernel
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_FORWARD_FORWARD_INL_H_
