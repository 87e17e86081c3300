// The lightning indexer's plain interface: the plan of a call (its work items and their keys) and the
// kernel's entry points, one per cache element type, each compiled for every Highway target and chosen at run
// time once per call (src/simd/dispatch.h).
//   1. Plan: a work item is one query row and one chunk of the keys it sees. A call with fewer rows than two
//      per thread splits each row's keys into chunks, each at least kMinChunkKeys and top_k long.
//   2. Allocate everything, before an output is written.
//   3. Per work item (in parallel): the row's query heads widened into panels once, then per block of keys:
//      the keys widened or dequantized, the block's scores (indexer-inl.h, ScoreBlock), and the running top-k
//      (top_k.h) offered the keys that pass its threshold.
//   4. A row of one chunk writes its keys; the chunks of a split row leave their lists, merged pairwise in
//      parallel rounds (the best k of two lists each), then written.
#ifndef FLASHATTN_INDEXER_INDEXER_H_
#define FLASHATTN_INDEXER_INDEXER_H_

#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "common/cache_element_traits.h"
#include "flashattn/indexer.h"
#include "simd/dispatch.h"

namespace flashattn::indexer_kernel {

// Keys per block: the block's float32 rows (48·d floats, 24 KiB at d = 128) stay in L1 while every panel of
// query heads passes over them, and 48 is a multiple of the register tile's 6 rows.
inline constexpr std::int64_t kBlockKeys = 48;
// The shortest chunk a row's keys are split into (and top_k).
inline constexpr std::int64_t kMinChunkKeys = 2048;

struct IndexerPlan {
  const IndexerParams& p;
  int threads;
  std::int64_t rows;        // batch·seqlen_q
  std::int64_t k;           // keys a row keeps: top_k, or fewer when no row sees that many
  std::int64_t chunks;      // per row
  std::int64_t chunk_keys;  // a multiple of kBlockKeys

  explicit IndexerPlan(const IndexerParams& params)
      : p(params), threads(params.num_threads > 0 ? params.num_threads : omp_get_max_threads()),
        rows(params.batch * params.seqlen_q) {
    std::int64_t most_keys = 0;
    for (std::int64_t b = 0; b < p.batch; ++b) most_keys = std::max(most_keys, Keys(b));
    k = std::max<std::int64_t>(1, std::min(p.top_k, most_keys));
    chunks = 1;
    if (rows > 0 && rows < 2 * threads) {
      const std::int64_t min_chunk = std::max(kMinChunkKeys, k);
      chunks = std::max<std::int64_t>(1, std::min((2 * threads + rows - 1) / rows, most_keys / min_chunk));
    }
    chunk_keys = (most_keys + chunks - 1) / chunks;
    chunk_keys = std::max<std::int64_t>(kBlockKeys, (chunk_keys + kBlockKeys - 1) / kBlockKeys * kBlockKeys);
  }

  std::int64_t Items() const { return rows * chunks; }
  // Nk of sequence b.
  std::int64_t Keys(std::int64_t b) const {
    return p.cache_seqlens != nullptr ? p.cache_seqlens[b] : p.cache_seqlen_max;
  }
  // The keys [0, Seen) that row t of sequence b sees.
  std::int64_t Seen(std::int64_t b, std::int64_t t) const {
    const std::int64_t Nk = Keys(b);
    return p.causal ? std::clamp<std::int64_t>(t + Nk - p.seqlen_q + 1, 0, Nk) : Nk;
  }
};

void IndexerF32(const IndexerParams& params);
void IndexerF16(const IndexerParams& params);
void IndexerBF16(const IndexerParams& params);
void IndexerI8(const IndexerParams& params);
void IndexerFp8E4M3(const IndexerParams& params);
void IndexerFp8E5M2(const IndexerParams& params);

// The kernel of a quantized cache by its storage type (simd::CallForCacheElement).
template <typename Storage>
struct QuantizedIndexer;
template <>
struct QuantizedIndexer<std::int8_t> {
  static void Call(const IndexerParams& params) { IndexerI8(params); }
};
template <>
struct QuantizedIndexer<Fp8E4M3> {
  static void Call(const IndexerParams& params) { IndexerFp8E4M3(params); }
};
template <>
struct QuantizedIndexer<Fp8E5M2> {
  static void Call(const IndexerParams& params) { IndexerFp8E5M2(params); }
};

// The kernel of the call's cache element type (a float cache's by cache_dtype). Takes validated params.
inline void LightningIndexer(const IndexerParams& params) {
  simd::CallForCacheElement<IndexerF32, IndexerF16, IndexerBF16, QuantizedIndexer>(params.cache_element,
                                                                                  params.cache_dtype, params);
}

}  // namespace flashattn::indexer_kernel

#endif  // FLASHATTN_INDEXER_INDEXER_H_
