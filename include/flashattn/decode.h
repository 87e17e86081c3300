// decode: attention of a few new query rows against a long key/value cache (Flash-Decoding), with
// flash-attn's flash_attn_with_kvcache semantics; the differences are noted where they occur.
#ifndef FLASHATTN_DECODE_H_
#define FLASHATTN_DECODE_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "flashattn/export.h"
#include "flashattn/types.h"

namespace flashattn {

// How the elements of k_cache and v_cache encode the cached values (docs/quantized_cache.md). K and V
// share it: one element type per call.
enum class CacheElement : std::uint8_t {
  kFloat,    // elements of cache_dtype (f32, f16, bf16); no scales
  kInt8,     // int8 q in [−127, 127], symmetric: value = scale·q
  kFp8E4M3,  // OCP FP8 E4M3 byte (sign, 4 exponent bits of bias 7, 3 mantissa bits; max 448, no infinities,
             // NaN = S.1111.111): value = scale·e4m3(q). Never written by decode or quantize_kv; a NaN byte
             // in a cache decode is given is not tested for and reads as ±480·scale (finite, no error).
  kFp8E5M2,  // OCP FP8 E5M2 byte (sign, 5 exponent bits of bias 15, 2 mantissa bits: the upper byte of an IEEE
             // float16; max 57344, ±inf = S.11111.00, NaN = S.11111.xx with xx ≠ 0): value = scale·e5m2(q).
             // Quantizing saturates at ±57344 and never writes inf or NaN; an inf or NaN byte in a cache decode
             // is given reads as inf or NaN, as in a float cache.
};

// "float", "int8", "fp8_e4m3", "fp8_e5m2".
FLASHATTN_API std::string_view to_string(CacheElement element);

// Which cached values share one float32 scale of a quantized cache.
enum class ScaleGranularity : std::uint8_t {
  // One per (key position, K/V head), or per group of scale_group_size features of it: a float32 tensor
  // (batch or num_pages, Nmax or page_size, Hkv, d / g) with strides scale_strides (the group stride is 1).
  // The scales of appended keys are written by the append: scale = max|x| / qmax over the group (qmax = 127
  // for int8, 448 for fp8 E4M3, 57344 for fp8 E5M2; 0 for an all-zero group, whose values are then all 0).
  kPerToken,
  kPerHead,    // one per K/V head: Hkv contiguous floats, fixed; appended keys are quantized with it
  kPerTensor,  // one float for the whole cache, fixed
};

// "per_token", "per_head", "per_tensor".
FLASHATTN_API std::string_view to_string(ScaleGranularity granularity);

// The granularity for a caller that names none, as llama.cpp's q8_0 and vLLM's fp8 caches use them: per token
// for int8, per K/V head for fp8; per token whenever a scale group size is given (groups exist per token only).
FLASHATTN_API ScaleGranularity default_scale_granularity(CacheElement element, std::int64_t group_size = 0);

//   q        (batch, Nq, Hq, d)                       Nq small: 1 for plain decoding, a few for speculation
//   cache    contiguous: k_cache, v_cache (batch, Nmax, Hkv, d or dv)
//            paged:      k_cache, v_cache (num_pages, page_size, Hkv, d or dv) and block_table (batch, max_pages)
//                        int32: key position j of sequence b lives in page block_table[b][j / page_size],
//                        slot j % page_size. Any page_size ≥ 1.
//   cache_seqlens (batch) int32: keys already in the cache per sequence.
//   k_new, v_new  optional (batch, Nnew, Hkv, d or dv): rotated (if rotary is set) and written into the cache in
//                 place at positions cache_seqlens[b] + i before attending. The call then attends to
//                 Nk = cache_seqlens[b] + Nnew keys of sequence b.
//   o        (batch, Nq, Hq, dv); lse optional float32 (batch, Hq, Nq), −inf for a row that sees no key
//            (s_h with an attention sink: `sinks` of ScoreSettings joins each row once, however it is split).
//
// Packed queries (flash_attn_varlen_func over a cache, vLLM's prefill-and-decode step): with cu_seqlens_q set,
// sequence b has its own query count Nq_b = cu_seqlens_q[b + 1] − cu_seqlens_q[b] (any mix of 0, 1 and
// thousands), and q, o, k_new, v_new are packed along the rows, as flash_attn_varlen_func packs them:
//   q (total_q, Hq, d), o (total_q, Hq, dv), k_new, v_new (total_q, Hkv, d or dv), total_q = cu_seqlens_q[batch];
//   rows of sequence b at cu_seqlens_q[b] + i; the strides' `batch` entries are ignored (`seq` is the row stride);
//   lse (Hq, total_q), flash-attn's varlen layout.
// seqlen_q is then max_seqlen_q, an upper bound every Nq_b must respect (checked). The append is all or
// nothing: seqlen_new is 0 (nothing appended; Nk = cache_seqlens[b], vLLM's seqused_k) or equal to seqlen_q,
// and then each sequence appends its own Nq_b rows of k_new, v_new (the rows of its queries) at cache_seqlens[b]
// + i, so Nk = cache_seqlens[b] + Nq_b. Either way query row i of sequence b sits at position Nk − Nq_b + i
// (bottom-right aligned, per sequence). A sequence with no query rows writes nothing; its keys are still
// appended.
//
// The heads, head dimensions, element type, score modifiers and threads are the inherited HeadSettings
// (include/flashattn/types.h), as in every attention call: d = head_dim is that of q, k_new and the K cache,
// dv = head_dim_v (unset = d, flash-attn's API) that of v_new, the V cache and o. The score modifiers align
// the Nq queries with the last key positions: query row i of sequence b sits at position
// cache_seqlens[b] + Nnew − Nq + i. q, k_new, v_new and o share one float type (`dtype`); the caches hold
// elements of `cache_element`: of the float type `cache_dtype` (which may differ from `dtype`), or quantized
// int8 / fp8 E4M3 / fp8 E5M2 with float32 scales (k_scale, v_scale). Appended keys and values are rounded to
// the cache's float type, or quantized (round to nearest even, saturating at ±qmax); a quantized cache rejects
// an inf or NaN in k_new or v_new.
// The cache strides describe both k_cache and v_cache (for paged caches `cache_strides.batch` is the page
// stride), in elements; scale_strides likewise describe both k_scale and v_scale; new_strides both k_new and
// v_new.
//
// Values inside the keys (multi-head latent attention, DeepSeek-V2/V3): with v_cache == k_cache, V is the first
// dv = head_dim_v ≤ d features of each K row (the same pointer and strides, nothing stored twice). An append
// then writes k_new's row once, and v_new must be null. In a quantized cache V's values are scaled by K's
// scales: v_scale is null or k_scale, and scale groups divide dv too. A quantized cache with a V cache of its
// own needs head_dim_v = head_dim.
struct DecodeParams : HeadSettings {
  const void* q = nullptr;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  const void* k_new = nullptr;
  const void* v_new = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  const std::int32_t* cache_seqlens = nullptr;
  // Optional (batch) int32, each ≥ 0, for a cache that holds one shard of each sequence (context
  // parallelism, docs/distributed.md): keys_after[b] more keys of sequence b follow this call's Nk keys
  // elsewhere. The queries stay the last Nq positions of the whole sequence, so query row i has the diagonal
  // Nk + keys_after[b] − Nq + i in this call's key positions (for the band and ALiBi). Rotary still uses the
  // positions cache_seqlens[b] + i (shift the tables to move them). Null = the cache ends the sequence.
  const std::int32_t* keys_after = nullptr;
  // Optional (batch + 1) int32, non-decreasing from 0: packed queries (above). Null = every sequence has
  // seqlen_q rows in (batch, seqlen_q, ...) tensors.
  const std::int32_t* cu_seqlens_q = nullptr;

  Strides q_strides, cache_strides, new_strides, o_strides;

  std::int64_t batch = 1;
  std::int64_t seqlen_q = 0;    // Nq; packed: max_seqlen_q, ≥ every Nq_b
  std::int64_t seqlen_new = 0;  // Nnew; 0 = nothing appended (k_new, v_new may be null); packed: 0 or seqlen_q
  DType cache_dtype = DType::kF32;  // of a float cache (cache_element = kFloat)

  // A quantized cache: its element type and scales (ScaleGranularity says their shape). Null scales for a
  // float cache.
  CacheElement cache_element = CacheElement::kFloat;
  ScaleGranularity scale_granularity = ScaleGranularity::kPerToken;
  float* k_scale = nullptr;
  float* v_scale = nullptr;
  Strides scale_strides;              // per token: (batch or page, seq, head), in floats
  std::int64_t scale_group_size = 0;  // per token: features per scale g, divides d; 0 = d (one per row)
  // An int8 cache only: the scores Q Kᵀ from integer dot products. Each query row (times the softmax scale)
  // is quantized to int8 per scale group of the cache (scale = max|q| / 127 per group of g features, round
  // to nearest even), and a score is the exact int32 dot product of each group times q's and k's scales.
  // It trades q's rounding error (docs/quantized_cache.md gives the figures: within the bounds of the int8
  // cache's own) for integer throughput: on x86 CPUs with AVX-512 VNNI (Highway's AVX3_DL target: Ice Lake,
  // Zen 4 and later) the dot products are vpdpbusd's; other CPUs compute the same integers portably, so the
  // scores are identical on every target. P V stays float32. A query row holding an inf or a NaN gets NaN
  // scores. Rejected for a float or fp8 cache.
  bool quantize_query_int8 = false;
  // An int8 cache with one scale per row (no scale groups) only: P̃ V from integer dot products. For each
  // query row and each block of keys the kernel takes at a time, the weights w_c = P̃_c · v_scale_c are
  // rounded to unsigned 8 bits relative to the block's largest, u_c = round(255 · w_c / max w) (to nearest
  // even), and the row's Õ gains (max w / 255) · Σ_c u_c · v_c, the sum an exact int32; l still sums the
  // unrounded P̃. It trades that rounding (docs/quantized_cache.md gives the figures) for integer throughput:
  // vpdpbusd on AVX-512 VNNI, the same exact sums portably elsewhere. A V scale that is not a finite
  // non-negative number makes the rows that see its key NaN. Rejected for a float or fp8 cache and for scale
  // groups.
  bool quantize_probs_u8 = false;

  // Contiguous cache: its capacity Nmax. Paged cache: block_table set, cache_seqlen_max ignored.
  std::int64_t cache_seqlen_max = 0;
  const std::int32_t* block_table = nullptr;  // (batch, max_pages), row stride block_table_stride
  std::int64_t block_table_stride = 0;
  std::int64_t max_pages = 0;                 // pages per sequence in the table
  std::int64_t num_pages = 0;                 // pages in the cache
  std::int64_t page_size = 0;

  // Rotary embedding of the first rotary_dim features of q and k_new: k_new row i at position
  // cache_seqlens[b] + i; query row i there too, or every query row at cache_seqlens[b] when
  // rotary_queries_at_cache_end is set (flash-attn's rule when neither causal nor local, which the Python
  // package's flash_attn_with_kvcache follows). flash-attn rotates only when k_new is given; this rotates q
  // in every case. Tables are float32 (rotary_max_pos, rotary_dim / 2), contiguous. interleaved = GPT-J pairs
  // (x[2c], x[2c+1]); otherwise GPT-NeoX halves (x[c], x[c + rotary_dim/2]). For each pair (x0, x1) and angle
  // index c at position pos:
  //   x0' = x0·cos[pos][c] − x1·sin[pos][c],   x1' = x0·sin[pos][c] + x1·cos[pos][c]
  const float* rotary_cos = nullptr;
  const float* rotary_sin = nullptr;
  std::int64_t rotary_dim = 0;  // even, ≤ d; 0 = no rotary
  std::int64_t rotary_max_pos = 0;
  bool rotary_interleaved = false;
  bool rotary_queries_at_cache_end = false;

  // Chunks of each sequence's key range, processed in parallel (a chunk covers every K/V head, so the cache
  // is read in address order) and merged by LSE. 0 = heuristic (see choose_num_splits), 1 = no splitting,
  // n = n chunks (some empty if there are fewer keys).
  std::int64_t num_splits = 0;

  // Selected keys: (batch, seqlen_q, Hkv, k) int32, contiguous, or (total_q, Hkv, k) when packed; row i of K/V
  // head g attends exactly key_indices[.., i, g, :], positions of the cache after this call's append.
  KeySelection key_indices;

  // A block mask and document ids as forward's (docs/sparse_attention.md), in this call's coordinates:
  // sequence b has Nk_b = cache_seqlens[b] + its new rows keys and its Nq_b query rows at the end; query row i
  // is in query block i / Qb, key position j (logical, before the block table) in key block j / Kb. The lists
  // are (batch, heads, ⌈seqlen_q / Qb⌉, width). document_ids: (batch, capacity) int32 over the cache's logical
  // positions (capacity = cache_seqlen_max, or max_pages·page_size when paged), row stride
  // document_ids_batch_stride (0 = capacity); row i takes the id of its position i + Nk_b − Nq_b. Neither
  // combines with packed queries or key_indices.
  BlockMask block_mask;
  const std::int32_t* document_ids = nullptr;
  std::int64_t document_ids_batch_stride = 0;

  bool paged() const { return block_table != nullptr; }
  bool packed() const { return cu_seqlens_q != nullptr; }
  // Sequence b's query rows Nq_b, and the keys it appends (Nnew, or Nq_b when packed and appending).
  std::int64_t query_rows(std::int64_t b) const {
    return packed() ? std::int64_t{cu_seqlens_q[b + 1]} - cu_seqlens_q[b] : seqlen_q;
  }
  std::int64_t new_rows(std::int64_t b) const { return packed() && seqlen_new > 0 ? query_rows(b) : seqlen_new; }
  // Query rows of the whole call: total_q when packed, else batch·seqlen_q.
  std::int64_t total_query_rows() const { return packed() ? std::int64_t{cu_seqlens_q[batch]} : batch * seqlen_q; }
  // The element offset of row i, head h of sequence b in q, o, k_new or v_new, whose strides are s.
  std::int64_t row_offset(const Strides& s, std::int64_t b, std::int64_t i, std::int64_t h) const {
    return packed() ? (cu_seqlens_q[b] + i) * s.seq + h * s.head : b * s.batch + i * s.seq + h * s.head;
  }
  // The index of row i, query head h of sequence b in lse: (Hq, total_q) when packed, else (batch, Hq, Nq).
  std::int64_t lse_index(std::int64_t b, std::int64_t h, std::int64_t i) const {
    return packed() ? h * total_query_rows() + cu_seqlens_q[b] + i : (b * heads_q + h) * seqlen_q + i;
  }
  // V is the first dv features of the K cache's rows (v_cache == k_cache, see above).
  bool values_in_keys() const { return v_cache != nullptr && v_cache == k_cache; }
  // The scales of V's values: k_scale when V is inside the K rows (V's groups are the first dv / g of K's).
  float* value_scales() const { return values_in_keys() ? k_scale : v_scale; }
  // Fills q/new/o strides for contiguous (batch, seq, head, dim) tensors (o of dv, the others of d), or, when
  // packed, for contiguous (total_q, head, dim) ones (their batch strides 0),
  // cache_strides for a contiguous (batch, cache_seqlen_max, Hkv, d) cache or, when paged, (num_pages,
  // page_size, Hkv, d), and scale_strides for contiguous per-token scales of the same (batch or page, seq,
  // head) with d / g groups.
  FLASHATTN_API void set_contiguous_strides();
};

// The split count used for num_splits = 0. A work item is one chunk of one sequence, for all its K/V heads
// (each K/V byte read once, in address order), so the parallelism comes from batch × chunks: no split when
// the batch alone gives every thread two items; otherwise enough chunks for two per thread, each chunk at
// least 512 keys long. Heads are not separate work items: a chunk reads the cache rows of all its K/V heads
// in address order, one stream (docs/io.md counts decode's traffic).
FLASHATTN_API std::int64_t choose_num_splits(std::int64_t batch, std::int64_t max_seqlen_k, int num_threads);

// Checks everything (including every block-table entry the call reads or writes) before anything is
// written: when it throws, the cache and the outputs are unchanged.
FLASHATTN_API void validate(const DecodeParams& params);
FLASHATTN_API void decode(const DecodeParams& params);

// quantize_kv: a quantized cache filled from float values, with the scales decode() reads.
//   x       (outer, seqlen, heads, d) of `dtype`, strides x_strides: all finite
//   values  the same shape, one byte per element, strides value_strides
//   scales  float32: per token (outer, seqlen, heads, d / g) with strides scale_strides (group stride 1);
//           per head (heads) contiguous; per tensor one float. Each scale is max|x| / qmax over the values
//           it covers (0 when they are all 0), and each value round(x / scale) to nearest even.
struct QuantizeParams {
  const void* x = nullptr;
  void* values = nullptr;
  float* scales = nullptr;
  Strides x_strides, value_strides, scale_strides;
  std::int64_t outer = 1, seqlen = 0, heads = 1, head_dim = 0;
  DType dtype = DType::kF32;
  CacheElement element = CacheElement::kInt8;
  ScaleGranularity granularity = ScaleGranularity::kPerToken;
  std::int64_t group_size = 0;  // per token: features per scale, divides head_dim; 0 = head_dim

  // Fills the three strides for contiguous tensors.
  FLASHATTN_API void set_contiguous_strides();
};

// Throws Error before writing anything: a bad shape, overlapping tensors, or an inf or NaN in x.
FLASHATTN_API void validate(const QuantizeParams& params);
FLASHATTN_API void quantize_kv(const QuantizeParams& params);

}  // namespace flashattn

#endif  // FLASHATTN_DECODE_H_
