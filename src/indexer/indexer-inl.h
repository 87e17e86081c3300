// lightning_indexer() per Highway target, for one cache element type TK: the work items of the plan
// (indexer.h) run by the thread team, each a query row's running top-k over one chunk of its keys, block by
// block. A block's scores are a register-tile product fused with the rest of the formula:
//   S[c][j] = Σ_e K[c][e]·Q[j][e]   (6 keys × 2 vectors of heads per tile, the forward kernel's tile)
//   I[c]   += Σ_j w_j·ReLU(S[c][j]) (in the tile's last step: the products never leave the registers)
// so a row's scores exist one block at a time, and only those that pass the top-k's threshold are offered.
// (The heads' sum is kept lane by lane across the panels of heads and summed across the lanes once per key.)
#if defined(FLASHATTN_INDEXER_INDEXER_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_INDEXER_INDEXER_INL_H_
#undef FLASHATTN_INDEXER_INDEXER_INL_H_
#else
#define FLASHATTN_INDEXER_INDEXER_INL_H_
#endif

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>

#include "common/constants.h"
#include "common/element.h"
#include "flashattn/indexer.h"
#include "hwy/highway.h"
#include "indexer/indexer.h"
#include "indexer/top_k.h"
#include "simd/convert-inl.h"
#include "simd/register_tiles-inl.h"
#include "simd/scratch.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE::indexer_kernel {
using flashattn::indexer_kernel::IndexerPlan;
using flashattn::indexer_kernel::kBlockKeys;
using flashattn::indexer_kernel::PositionOf;
using flashattn::indexer_kernel::RunningTopK;
using flashattn::indexer_kernel::ScoreOf;
using flashattn::indexer_kernel::SortBest;

// One thread's working memory.
struct IndexerScratch {
  float* Q;        // the row's query heads in panels of NR heads: Q[p·NR·d + e·NR + n] = q[p·NR + n][e]
  float* w;        // the row's weights, zero beyond the heads
  float* K;        // a block of keys, row-major float32 (kBlockKeys × d)
  float* sums;     // the block's scores lane by lane, kBlockKeys × Lanes
  float* I;        // the block's scores
  float* partial;  // a tile's first vector of weighted products per key, kMR × Lanes
  std::uint64_t* candidates;

  static IndexerScratch Carve(simd::ScratchCarver& c, std::int64_t heads_pad, std::int64_t d,
                              std::int64_t candidates) {
    const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(DF()));
    IndexerScratch x;
    x.Q = c.Take<float>(heads_pad * d);
    x.w = c.Take<float>(heads_pad);
    x.K = c.Take<float>(kBlockKeys * d);
    x.sums = c.Take<float>(kBlockKeys * L);
    x.I = c.Take<float>(RoundUp(kBlockKeys, L));
    x.partial = c.Take<float>(kMR * L);
    x.candidates = c.Take<std::uint64_t>(candidates);
    return x;
  }
};

// Query row t of sequence b widened into panels, and its weights.
inline void LoadRow(const IndexerParams& p, std::int64_t b, std::int64_t t, std::int64_t heads_pad,
                    const IndexerScratch& x) {
  const std::int64_t NR = 2 * static_cast<std::int64_t>(hn::Lanes(DF()));
  const std::int64_t d = p.head_dim;
  for (std::int64_t j = 0; j < heads_pad; ++j) {
    float* column = x.Q + (j / NR) * NR * d + j % NR;
    const std::int64_t row = b * p.q_strides.batch + t * p.q_strides.seq + j * p.q_strides.head;
    for (std::int64_t e = 0; e < d; ++e) column[e * NR] = j < p.heads ? LoadAsFloat(p.q, p.dtype, row + e) : 0.0f;
    x.w[j] = j < p.heads ? p.weights[(b * p.seqlen_q + t) * p.heads + j] : 0.0f;
  }
}

// Keys [s0, s0 + n) of sequence b as float32 rows: widened, or dequantized by their row's scale.
template <typename TK>
void LoadKeys(const IndexerParams& p, std::int64_t b, std::int64_t s0, std::int64_t n, float* K) {
  const std::int64_t d = p.head_dim;
  for (std::int64_t c = 0; c < n; ++c) {
    const std::int64_t s = s0 + c;
    std::int64_t outer = b, slot = s;
    if (p.paged()) {
      outer = p.block_table[b * p.block_table_stride + s / p.page_size];
      slot = s % p.page_size;
    }
    const TK* row = static_cast<const TK*>(p.k_cache) + outer * p.cache_strides.batch + slot * p.cache_strides.seq;
    if constexpr (CacheElementTraits<TK>::kQuantized) {
      const float scale = p.k_scale[outer * p.scale_strides.batch + slot * p.scale_strides.seq];
      DequantizeRow(row, d, d, &scale, d, K + c * d);
    } else {
      WidenRow(row, d, d, K + c * d);
    }
  }
}

// sums[r] += Σ_{heads of the panel} w·ReLU(K[r] · Q_head), lane by lane, for kRows keys: the register tile
// over d, then per key its two vectors of heads weighted and added to its lanes. ReLU keeps a NaN (x < 0 ? 0 :
// x), and the lanes of padded heads are left out (not multiplied by 0, which would turn an inf product into a
// NaN).
template <int kRows>
HWY_INLINE void KeyTile(const float* HWY_RESTRICT K, std::int64_t d, const float* HWY_RESTRICT panel,
                        const float* HWY_RESTRICT w, std::int64_t heads_left, float* HWY_RESTRICT partial,
                        float* HWY_RESTRICT sums) {
  const DF df;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(df));
  const VF w0 = hn::LoadU(df, w), w1 = hn::LoadU(df, w + L);
  const auto valid0 = hn::FirstN(df, static_cast<std::size_t>(std::min(heads_left, L)));
  const auto valid1 = hn::FirstN(df, static_cast<std::size_t>(std::clamp<std::int64_t>(heads_left - L, 0, L)));
  const auto start = [&](int, int) FLASHATTN_INLINE_LAMBDA { return hn::Zero(df); };
  const auto a_of = [&](int r, std::int64_t e) FLASHATTN_INLINE_LAMBDA { return K[r * d + e]; };
  const auto b_of = [&](std::int64_t e, int v) FLASHATTN_INLINE_LAMBDA {
    return hn::LoadU(df, panel + e * 2 * L + v * L);
  };
  // Called for (r, 0) then (r, 1): the first vector waits in `partial` for the second.
  const auto finish = [&](int r, int v, VF s) FLASHATTN_INLINE_LAMBDA {
    const VF relu = hn::IfThenZeroElse(hn::Lt(s, hn::Zero(df)), s);
    if (v == 0) {
      hn::StoreU(hn::IfThenElseZero(valid0, hn::Mul(w0, relu)), df, partial + r * L);
    } else {
      const VF both = hn::Add(hn::LoadU(df, partial + r * L), hn::IfThenElseZero(valid1, hn::Mul(w1, relu)));
      hn::StoreU(hn::Add(hn::LoadU(df, sums + r * L), both), df, sums + r * L);
    }
  };
  RegisterTile<kRows, 2>(0, d, start, a_of, b_of, finish);
}

// The scores I[0, n) of a block of n keys (K, row-major) against the row's query panels: each key's lanes
// summed over the panels, then across the lanes.
inline void ScoreBlock(const IndexerScratch& x, std::int64_t n, std::int64_t d, std::int64_t heads) {
  const DF df;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(df));
  const std::int64_t NR = 2 * L;
  std::fill(x.sums, x.sums + kBlockKeys * L, 0.0f);
  for (std::int64_t p0 = 0; p0 < heads; p0 += NR) {
    const float* panel = x.Q + p0 * d;
    for (std::int64_t c0 = 0; c0 < n; c0 += kMR) {
      WithRows(std::min(kMR, n - c0), [&](auto mr) FLASHATTN_INLINE_LAMBDA {
        KeyTile<decltype(mr)::value>(x.K + c0 * d, d, panel, x.w + p0, heads - p0, x.partial, x.sums + c0 * L);
      });
    }
  }
  std::fill(x.I, x.I + RoundUp(kBlockKeys, L), 0.0f);
  for (std::int64_t c = 0; c < n; ++c) x.I[c] = hn::GetLane(hn::SumOfLanes(df, hn::LoadU(df, x.sums + c * L)));
}

// Offers the block's keys at positions s0 + c, c < n, that may beat the top-k's threshold (a NaN always
// reaches the exact test).
inline void OfferBlock(const float* I, std::int64_t n, std::int64_t s0, RunningTopK& top) {
  const DF df;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(df));
  top.MakeRoom(n);
  const VF threshold = hn::Set(df, top.Threshold());
  for (std::int64_t c0 = 0; c0 < n; c0 += L) {
    if (hn::AllTrue(df, hn::Lt(hn::LoadU(df, I + c0), threshold))) continue;
    for (std::int64_t c = c0; c < std::min(c0 + L, n); ++c) top.Offer(I[c], static_cast<std::int32_t>(s0 + c));
  }
}

// Row `row`'s keys best first into its outputs: count candidates, then −1 (and −inf).
inline void WriteRow(const IndexerParams& p, std::int64_t row, const std::uint64_t* keys, std::int64_t count) {
  std::int32_t* indices = p.key_indices + row * p.top_k;
  float* scores = p.scores == nullptr ? nullptr : p.scores + row * p.top_k;
  for (std::int64_t slot = 0; slot < p.top_k; ++slot) {
    const bool kept = slot < count;
    indices[slot] = kept ? PositionOf(keys[slot]) : -1;
    if (scores != nullptr) {
      scores[slot] = kept ? ScoreOf(keys[slot]) : -std::numeric_limits<float>::infinity();
    }
  }
}

// One work item: row `row` over chunk `chunk` of its keys. Returns the count of its best keys, left unsorted at
// the start of the scratch's candidates.
template <typename TK>
std::int64_t RunItem(const IndexerPlan& plan, std::int64_t row, std::int64_t chunk, std::int64_t heads_pad,
                     std::int64_t capacity, const IndexerScratch& x) {
  const IndexerParams& p = plan.p;
  const std::int64_t b = row / p.seqlen_q, t = row % p.seqlen_q;
  const std::int64_t begin = chunk * plan.chunk_keys;
  const std::int64_t end = std::min(begin + plan.chunk_keys, plan.Seen(b, t));
  RunningTopK top(x.candidates, plan.k, capacity);
  if (begin >= end) return top.Finish();
  LoadRow(p, b, t, heads_pad, x);
  for (std::int64_t s0 = begin; s0 < end; s0 += kBlockKeys) {
    const std::int64_t n = std::min(kBlockKeys, end - s0);
    LoadKeys<TK>(p, b, s0, n, x.K);
    ScoreBlock(x, n, p.head_dim, p.heads);
    OfferBlock(x.I, n, s0, top);
  }
  return top.Finish();
}

// The best k of the lists a (*a_count keys) and b (b_count keys), unsorted, into a; `both` holds 2k keys.
inline void MergeLists(std::uint64_t* a, std::int64_t* a_count, const std::uint64_t* b, std::int64_t b_count,
                       std::int64_t k, std::uint64_t* both) {
  std::copy(a, a + *a_count, both);
  std::copy(b, b + b_count, both + *a_count);
  const std::int64_t n = *a_count + b_count;
  if (n > k) std::nth_element(both, both + (k - 1), both + n, std::greater<>());
  *a_count = std::min(n, k);
  std::copy(both, both + *a_count, a);
}

template <typename TK>
void IndexerT(const IndexerParams& p) {
  const IndexerPlan plan(p);
  if (plan.rows == 0) return;
  const std::int64_t NR = 2 * static_cast<std::int64_t>(hn::Lanes(DF()));
  const std::int64_t heads_pad = RoundUp(p.heads, NR);
  const std::int64_t capacity = plan.k + std::max(plan.k, kBlockKeys);
  const auto carve = [&](simd::ScratchCarver& c) { return IndexerScratch::Carve(c, heads_pad, p.head_dim, capacity); };
  const int threads = static_cast<int>(std::min<std::int64_t>(plan.threads, plan.Items()));
  const simd::ScratchArena arena(threads, carve);
  // A split row's chunks leave their best keys here: (row, chunk) at (row·chunks + chunk)·k, with their count.
  const bool split = plan.chunks > 1;
  const auto lists = simd::AllocateOrThrow<std::uint64_t>(split ? plan.Items() * plan.k : 0);
  const auto counts = simd::AllocateOrThrow<std::int64_t>(split ? plan.Items() : 0);
#pragma omp parallel num_threads(threads)
  {
    const IndexerScratch x = arena.Share(omp_get_thread_num(), carve);
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t item = 0; item < plan.Items(); ++item) {
      const std::int64_t row = item / plan.chunks, chunk = item % plan.chunks;
      const std::int64_t count = RunItem<TK>(plan, row, chunk, heads_pad, capacity, x);
      if (!split) {
        WriteRow(p, row, x.candidates, SortBest(x.candidates, count, plan.k));
      } else {
        std::copy(x.candidates, x.candidates + count, lists.get() + item * plan.k);
        counts.get()[item] = count;
      }
    }
    if (split) {
      // Each row's chunk lists merged pairwise in rounds, all rows' pairs of a round in parallel: list c takes
      // the best k of itself and list c + step. After ⌈log2 chunks⌉ rounds list 0 holds the row's best k.
      for (std::int64_t step = 1; step < plan.chunks; step *= 2) {
        const std::int64_t pairs = (plan.chunks - step + 2 * step - 1) / (2 * step);  // per row
#pragma omp for schedule(dynamic, 1)
        for (std::int64_t task = 0; task < plan.rows * pairs; ++task) {
          const std::int64_t into = (task / pairs) * plan.chunks + (task % pairs) * 2 * step;
          MergeLists(lists.get() + into * plan.k, counts.get() + into, lists.get() + (into + step) * plan.k,
                     counts.get()[into + step], plan.k, x.candidates);
        }
      }
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t row = 0; row < plan.rows; ++row) {
        std::uint64_t* merged = lists.get() + row * plan.chunks * plan.k;
        WriteRow(p, row, merged, SortBest(merged, counts.get()[row * plan.chunks], plan.k));
      }
    }
  }
}

}  // namespace flashattn::HWY_NAMESPACE::indexer_kernel
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_INDEXER_INDEXER_INL_H_
