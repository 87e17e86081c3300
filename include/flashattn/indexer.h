// The lightning indexer of DeepSeek-V3.2's sparse attention: for each query row t and every key s it may see,
//   I[t, s] = Σ_j w[t, j] · ReLU(q[t, j] · k[s])
// over the indexer heads j (k has one head, shared by all of them), and each row keeps its top_k keys by I.
// The scores of a row never exist in full: the kernel keeps a running top-k per row over blocks of keys.
// docs/sparse_attention.md gives the scale factors DeepSeek's code folds into w.
#ifndef FLASHATTN_INDEXER_H_
#define FLASHATTN_INDEXER_H_

#include <cstdint>

#include "flashattn/decode.h"
#include "flashattn/export.h"
#include "flashattn/types.h"

namespace flashattn {

//   q         (batch, seqlen_q, heads, head_dim) of `dtype` (f32, f16, bf16), strides q_strides
//   k_cache   contiguous (batch, cache_seqlen_max, 1, head_dim), or paged (num_pages, page_size, 1, head_dim)
//             with block_table (batch, max_pages) int32: key s of sequence b is in page block_table[b][s /
//             page_size], slot s % page_size. Strides cache_strides (the head stride is unused). Elements of
//             `cache_element`: of the float type cache_dtype, or int8 / fp8 codes with one float32 scale
//             per key row, k = k_scale·code (k_scale (batch or page, seq), strides scale_strides.batch and
//             .seq; .head unused).
//   cache_seqlens  (batch) int32: the keys Nk_b of sequence b. Null: every sequence has cache_seqlen_max
//             keys (contiguous caches only).
//   weights   (batch, seqlen_q, heads) float32, contiguous: w[t, j], with every scale factor folded in.
//   key_indices  out (batch, seqlen_q, 1, top_k) int32, contiguous: row t's kept keys by descending I, ties
//             by ascending position; −1 in the slots beyond the keys the row sees. Positions are those of
//             the sequence (before the block table).
//   scores    optional out, the same shape, float32: each kept key's I, −inf in the unused slots.
// causal: query row t of Nq rows over Nk keys sits at position t + Nk − Nq and sees the keys s ≤ that (a row
// before the first key sees none); otherwise every row sees all Nk keys.
// A NaN score (from an inf or NaN in q, k or w) ranks below every number, −inf included; −0 and +0 tie.
// Scores are float32 sums; a key's score does not depend on the thread count, so neither does the result.
struct IndexerParams {
  const void* q = nullptr;
  const void* k_cache = nullptr;
  const float* k_scale = nullptr;
  const float* weights = nullptr;
  std::int32_t* key_indices = nullptr;
  float* scores = nullptr;
  const std::int32_t* cache_seqlens = nullptr;

  Strides q_strides, cache_strides, scale_strides;

  std::int64_t batch = 1;
  std::int64_t seqlen_q = 0;   // Nq
  std::int64_t heads = 1;      // H_I
  std::int64_t head_dim = 0;   // d_I, 1 … kMaxHeadDim
  DType dtype = DType::kF32;   // of q
  DType cache_dtype = DType::kF32;  // of a float cache
  CacheElement cache_element = CacheElement::kFloat;

  // Contiguous cache: its capacity. Paged cache: block_table set, cache_seqlen_max ignored.
  std::int64_t cache_seqlen_max = 0;
  const std::int32_t* block_table = nullptr;  // (batch, max_pages), row stride block_table_stride
  std::int64_t block_table_stride = 0;
  std::int64_t max_pages = 0;
  std::int64_t num_pages = 0;
  std::int64_t page_size = 0;

  std::int64_t top_k = 0;  // ≥ 1
  bool causal = true;
  int num_threads = 0;  // 0 = all cores

  bool paged() const { return block_table != nullptr; }
  // Fills q_strides for a contiguous q, cache_strides for a contiguous cache ((batch, cache_seqlen_max, 1, d) or
  // paged (num_pages, page_size, 1, d)) and scale_strides for contiguous scales of the same (batch or page, seq).
  FLASHATTN_API void set_contiguous_strides();
};

// Checks everything (every block-table entry the call reads too) before anything is written: when it throws,
// key_indices and scores are unchanged.
FLASHATTN_API void validate(const IndexerParams& params);
FLASHATTN_API void lightning_indexer(const IndexerParams& params);

}  // namespace flashattn

#endif  // FLASHATTN_INDEXER_H_
