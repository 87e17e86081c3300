// flashattn decoding API: attention of a few new query rows against a long key/value cache (Flash-Decoding,
// SPEC §4 `decode`), the merge of partial attention results by their log-sum-exp (SPEC §3), and the
// variable-length forward pass. Semantics follow the flash-attn package (`flash_attn_with_kvcache`,
// `flash_attn_varlen_func`); the differences are noted where they occur.
//
// Like flashattn.h, this header holds no SIMD types: plain structs of pointers, strides and sizes.
#ifndef FLASHATTN_DECODE_H_
#define FLASHATTN_DECODE_H_

#include <cstdint>
#include <optional>

#include "flashattn/flashattn.h"

namespace flashattn {

// ---------------------------------------------------------------------------------------------------------
// merge_attention_states: partial results over disjoint key sets, merged by their LSEs (SPEC §3):
//   LSE = log Σ_k e^{LSE_k},   O = Σ_k e^{LSE_k − LSE} O_k
// A partial with LSE_k = −∞ (it saw no key) contributes nothing; if every partial is −∞ the result is O = 0
// and LSE = −∞. LSEs are natural logarithms, as forward() writes them.
//
// Layout (flash-attn's, with the partial index in front):
//   o_partials   float32 (num_partials, batch, seqlen, heads, dv), contiguous
//   lse_partials float32 (num_partials, batch, heads, seqlen), contiguous
//   o            (batch, seqlen, heads, dv) of `dtype`, addressed through o_strides
//   lse          optional float32 (batch, heads, seqlen), contiguous
struct MergeParams {
  const float* o_partials = nullptr;
  const float* lse_partials = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  Strides o_strides;

  std::int64_t num_partials = 0;
  std::int64_t batch = 1;
  std::int64_t seqlen = 0;
  std::int64_t heads = 1;
  std::int64_t head_dim_v = 0;  // dv
  DType dtype = DType::kF32;    // element type of o

  // Fills o_strides for a contiguous (batch, seqlen, heads, dv) output.
  void SetContiguousStrides();
};

void Validate(const MergeParams& params);
void merge_attention_states(const MergeParams& params);

// ---------------------------------------------------------------------------------------------------------
// decode: flash_attn_with_kvcache.
//
//   q        (batch, Nq, Hq, d)                       Nq small: 1 for plain decoding, a few for speculation
//   cache    contiguous: k_cache, v_cache (batch, Nmax, Hkv, d)
//            paged:      k_cache, v_cache (num_pages, page_size, Hkv, d) and block_table (batch, max_pages)
//                        int32: key position j of sequence b lives in page block_table[b][j / page_size],
//                        slot j % page_size. Any page_size ≥ 1.
//   cache_seqlens (batch) int32: keys already in the cache per sequence.
//   k_new, v_new  optional (batch, Nnew, Hkv, d): rotated (if rotary is set) and written into the cache in
//                 place at positions cache_seqlens[b] + i before attending. The call then attends to
//                 Nk = cache_seqlens[b] + Nnew keys of sequence b.
//   o        (batch, Nq, Hq, d); lse optional float32 (batch, Hq, Nq), −inf for a row that sees no key.
//
// Masks and modifiers are those of AttentionParams, aligned so that the Nq queries are the last rows:
// query row i of sequence b sits at position cache_seqlens[b] + Nnew − Nq + i.
// q, k_new, v_new, the caches and o share one element type (`dtype` must equal `cache_dtype`); the cache
// strides describe both k_cache and v_cache (for paged caches `cache_strides.batch` is the page stride).
struct DecodeParams {
  const void* q = nullptr;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  const void* k_new = nullptr;
  const void* v_new = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  const std::int32_t* cache_seqlens = nullptr;

  Strides q_strides, cache_strides, new_strides, o_strides;

  std::int64_t batch = 1;
  std::int64_t seqlen_q = 0;    // Nq
  std::int64_t seqlen_new = 0;  // Nnew; 0 = nothing appended (k_new, v_new may be null)
  std::int64_t heads_q = 1;     // Hq
  std::int64_t heads_kv = 1;    // Hkv, divides Hq
  std::int64_t head_dim = 0;    // d (K and V share it, as in flash-attn's kvcache API)
  DType dtype = DType::kF32;
  DType cache_dtype = DType::kF32;

  // Contiguous cache: its capacity Nmax. Paged cache: block_table set, cache_seqlen_max ignored.
  std::int64_t cache_seqlen_max = 0;
  const std::int32_t* block_table = nullptr;  // (batch, max_pages), row stride block_table_stride
  std::int64_t block_table_stride = 0;
  std::int64_t max_pages = 0;                 // pages per sequence in the table
  std::int64_t num_pages = 0;                 // pages in the cache
  std::int64_t page_size = 0;

  // Rotary embedding of the first rotary_dim features of q and k_new, both at positions cache_seqlens[b] + i
  // (flash-attn's rule when causal or local; it rotates every query at cache_seqlens[b] otherwise, and
  // only when k_new is given, where this applies it to q in every case). Tables are float32 (rotary_max_pos,
  // rotary_dim / 2), contiguous. interleaved = GPT-J pairs (x[2c], x[2c+1]); otherwise GPT-NeoX halves
  // (x[c], x[c + rotary_dim/2]). For each pair (x0, x1) and angle index c at position pos:
  //   x0' = x0·cos[pos][c] − x1·sin[pos][c],   x1' = x0·sin[pos][c] + x1·cos[pos][c]
  const float* rotary_cos = nullptr;
  const float* rotary_sin = nullptr;
  std::int64_t rotary_dim = 0;  // even, ≤ d; 0 = no rotary
  std::int64_t rotary_max_pos = 0;
  bool rotary_interleaved = false;

  std::optional<float> scale;
  bool causal = false;
  std::int64_t window_left = -1;
  std::int64_t window_right = -1;
  float softcap = 0.0f;
  const float* alibi_slopes = nullptr;  // (Hq), or (batch, Hq) with row stride alibi_batch_stride
  std::int64_t alibi_batch_stride = 0;

  // Chunks of each sequence's key range, processed in parallel (a chunk covers every K/V head, so the cache
  // is read in address order) and merged by LSE. 0 = heuristic (see ChooseNumSplits), 1 = no splitting,
  // n = n chunks (some empty if there are fewer keys).
  std::int64_t num_splits = 0;
  int num_threads = 0;  // 0 = all cores

  bool Paged() const { return block_table != nullptr; }
  // Fills q/new/o strides for contiguous (batch, seq, head, dim) tensors and cache_strides for a
  // contiguous (batch, cache_seqlen_max, Hkv, d) cache or, when paged, (num_pages, page_size, Hkv, d).
  void SetContiguousStrides();
};

// The split count used for num_splits = 0. A work item is one chunk of one sequence, for all its K/V heads
// (each K/V byte read once, in address order), so the parallelism comes from batch × chunks: no split when
// the batch alone gives every thread two items; otherwise enough chunks for two per thread, each chunk at
// least 512 keys long. (Issue 4 phrased it as batch·Hkv against the thread count; heads are not separate
// work items here, see src/decode/attend.h for why.)
std::int64_t ChooseNumSplits(std::int64_t batch, std::int64_t max_seqlen_k, int num_threads);

// Checks everything (including every block-table entry the call reads or writes) before anything is
// written: when it throws, the cache and the outputs are unchanged.
void Validate(const DecodeParams& params);
void decode(const DecodeParams& params);

// ---------------------------------------------------------------------------------------------------------
// forward_varlen: flash_attn_varlen_func. Sequences of different lengths packed along one token axis:
//   q (total_q, Hq, d), k (total_k, Hkv, d), v (total_k, Hkv, dv), o (total_q, Hq, dv)
//   cu_seqlens_q (batch + 1) int32: sequence b owns rows [cu_seqlens_q[b], cu_seqlens_q[b+1]); starts at 0,
//   non-decreasing, ends at total_q (likewise cu_seqlens_k). Lengths must not exceed max_seqlen_q/_k.
//   lse optional float32 (Hq, total_q).
// Each sequence aligns its own causal mask (bottom-right within the sequence). `base` carries everything
// else: dtype, head counts, head dims, scale, masks, softcap, ALiBi (per (batch, head) if its batch stride
// is set), threads. Its q, k, v, o, lse, batch, seqlen and stride fields are ignored; mask tensors are not
// supported here. Each sequence is computed by forward() with offset pointers.
struct VarlenParams {
  AttentionParams base;
  std::int64_t total_q = 0;
  std::int64_t total_k = 0;
  std::int64_t q_row_stride = 0, q_head_stride = 0;  // 0 = contiguous
  std::int64_t k_row_stride = 0, k_head_stride = 0;
  std::int64_t v_row_stride = 0, v_head_stride = 0;
  std::int64_t o_row_stride = 0, o_head_stride = 0;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  std::int64_t batch = 0;
  const std::int32_t* cu_seqlens_q = nullptr;
  const std::int32_t* cu_seqlens_k = nullptr;
  std::int64_t max_seqlen_q = 0;
  std::int64_t max_seqlen_k = 0;
};

void Validate(const VarlenParams& params);
// Uses forward()'s default algorithm, or the one given.
void forward_varlen(const VarlenParams& params);
void forward_varlen(const VarlenParams& params, Algorithm algorithm);

}  // namespace flashattn

#endif  // FLASHATTN_DECODE_H_
