/* flashattn's C API: the library's functionality for C callers and for any language with a C foreign-function
 * interface (Rust, Go, Zig, Python's ctypes).
 *
 *   O = softmax(scale · Q Kᵀ + bias, masked) V        per (batch, query head)
 *
 * Plain structs of pointers, strides and sizes mirror the C++ API (include/flashattn/flashattn.h, decode.h,
 * backward.h), whose comments give the meaning of every field; this header notes only where the C form
 * differs. The ScoreSettings a C++ struct inherits (scale, causal, window, softcap, ALiBi, sinks) is its
 * member `score` here; the other inherited fields (HeadSettings: heads, dims, dtype, threads; and
 * AttentionSettings: dropout, block position, tiling) stand in the struct itself, under the C++ names.
 *
 * Every entry point returns a flashattn_status; nothing is thrown across the boundary. After a call that
 * fails, flashattn_last_error() gives the message, which names the argument and the offending values, and
 * nothing the caller owns has been written. Calls are thread-safe as the C++ ones are: each thread has its
 * own last error.
 *
 * Start every parameter struct from its *_init function (the defaults: batch 1, one head each, unbounded
 * windows, default scale, ...), set the sizes and pointers, then fill the strides with a
 * *_set_contiguous_strides function or by hand. Strides and sizes count elements, not bytes. A stride helper
 * reads the struct as the entry points do; one holding an enum value the library does not know keeps its
 * strides, and flashattn_last_error() names the field.
 *
 * The header is C11 (and C++); link with `pkg-config --libs flashattn` (add --static for the static
 * library). */
#ifndef FLASHATTN_C_API_H_
#define FLASHATTN_C_API_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Marks the exported functions: a shared libflashattn exports them even when built with hidden visibility. */
#if defined(__GNUC__) || defined(__clang__)
#define FLASHATTN_C_API __attribute__((visibility("default")))
#else
#define FLASHATTN_C_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum flashattn_status {
  FLASHATTN_OK = 0,
  FLASHATTN_ERROR_INVALID_ARGUMENT = 1, /* bad input: a null pointer, a size, a stride, an enum value, ... */
  FLASHATTN_ERROR_OUT_OF_MEMORY = 2,    /* a work buffer could not be allocated */
  FLASHATTN_ERROR_INTERNAL = 3          /* anything else; the message says what */
} flashattn_status;

/* Element type of Q, K, V, O (and the gradients). f16 is IEEE binary16, bf16 is bfloat16, each stored as
 * uint16_t. Accumulation is float32. */
typedef enum flashattn_dtype { FLASHATTN_DTYPE_F32 = 0, FLASHATTN_DTYPE_F16 = 1, FLASHATTN_DTYPE_BF16 = 2 } flashattn_dtype;

/* flashattn::CacheElement: how the elements of a decode cache encode its values (docs/quantized_cache.md). */
typedef enum flashattn_cache_element {
  FLASHATTN_CACHE_FLOAT = 0,   /* elements of cache_dtype, no scales */
  FLASHATTN_CACHE_INT8 = 1,    /* int8_t q: value = scale·q */
  FLASHATTN_CACHE_FP8_E4M3 = 2, /* uint8_t OCP FP8 E4M3 bytes: value = scale·e4m3(q) */
  FLASHATTN_CACHE_FP8_E5M2 = 3  /* uint8_t OCP FP8 E5M2 bytes: value = scale·e5m2(q) */
} flashattn_cache_element;

/* flashattn::ScaleGranularity: which cached values share one float32 scale of a quantized cache. */
typedef enum flashattn_scale_granularity {
  FLASHATTN_SCALE_PER_TOKEN = 0, /* per (key position, K/V head), or per group of scale_group_size features */
  FLASHATTN_SCALE_PER_HEAD = 1,  /* heads_kv floats, fixed */
  FLASHATTN_SCALE_PER_TENSOR = 2 /* one float, fixed */
} flashattn_scale_granularity;

/* Which implementation computes the forward pass; FUSED is the fast one, the others are the readable
 * reference algorithms and the float64 oracle. */
typedef enum flashattn_algorithm {
  FLASHATTN_ALGORITHM_FUSED = 0,
  FLASHATTN_ALGORITHM_STANDARD = 1,
  FLASHATTN_ALGORITHM_FLASH1 = 2,
  FLASHATTN_ALGORITHM_FLASH2 = 3,
  FLASHATTN_ALGORITHM_ORACLE = 4
} flashattn_algorithm;

typedef enum flashattn_backward_algorithm {
  FLASHATTN_BACKWARD_FUSED = 0,
  FLASHATTN_BACKWARD_STANDARD = 1,
  FLASHATTN_BACKWARD_ORACLE = 2
} flashattn_backward_algorithm;

/* Element strides of a rank-4 tensor (batch, sequence, head, feature); the feature stride is 1. */
typedef struct flashattn_strides {
  int64_t batch;
  int64_t seq;
  int64_t head;
} flashattn_strides;

typedef enum flashattn_mask_kind {
  FLASHATTN_MASK_NONE = 0,
  FLASHATTN_MASK_BOOL = 1,    /* uint8_t elements: non-zero = the key takes part */
  FLASHATTN_MASK_ADDITIVE = 2 /* float elements added to the scores (-inf masks the key out) */
} flashattn_mask_kind;

/* An attention-mask tensor broadcast to (batch, Hq, Nq, Nk) by its strides (0 repeats an element). */
typedef struct flashattn_mask {
  flashattn_mask_kind kind;
  const void* data;
  int64_t stride_batch;
  int64_t stride_head;
  int64_t stride_row;
  int64_t stride_col;
} flashattn_mask;

/* flashattn::BlockMask (FlexAttention's): per (batch, head, query block) lists of key blocks, int32, contiguous.
 * kv_indices[b, h, r, :kv_num_blocks[b, h, r]] are partial blocks (the element predicates apply),
 * full_kv_indices[b, h, r, :full_kv_num_blocks[b, h, r]] are seen whole; other blocks are never visited.
 * kv_num_blocks NULL = no block mask; full lists optional. flashattn_attention_params_init sets block sizes 128
 * and heads 1. docs/sparse_attention.md. */
typedef struct flashattn_block_mask {
  int64_t block_size_q;
  int64_t block_size_k;
  int64_t heads;                  /* 1 (every query head) or Hq */
  const int32_t* kv_num_blocks;   /* (batch, heads, ceil(Nq/block_size_q)) */
  const int32_t* kv_indices;      /* (batch, heads, ceil(Nq/block_size_q), kv_width) */
  int64_t kv_width;
  const int32_t* full_kv_num_blocks;
  const int32_t* full_kv_indices;
  int64_t full_kv_width;
} flashattn_block_mask;

/* flashattn::KeySelection: attention over selected keys, per (query row, K/V head) a list of `count` key
 * positions, int32, -1 = unused, each list a set; indices NULL = every key (count 0). */
typedef struct flashattn_key_selection {
  const int32_t* indices;
  int64_t count;
} flashattn_key_selection;

/* Block sizes of the tiled algorithms; 0 = chosen by the library. */
typedef struct flashattn_tiling {
  int64_t fast_memory_bytes;
  int64_t block_rows;
  int64_t block_cols;
} flashattn_tiling;

/* flashattn::ScoreSettings: what turns the products q·k into the scores the softmax sees, shared by the
 * forward, varlen and decode calls (the `score` member of each). */
typedef struct flashattn_score_settings {
  bool has_scale; /* false: scale = 1/sqrt(head_dim) */
  float scale;
  bool causal;
  int64_t window_left; /* -1 = unbounded */
  int64_t window_right;
  float softcap;             /* 0 = off */
  const float* alibi_slopes; /* (Hq), or (batch, Hq) with row stride alibi_batch_stride; NULL = off */
  int64_t alibi_batch_stride;
  const float* sinks; /* attention sinks: one logit per query head, float32 (Hq); NULL = none */
} flashattn_score_settings;

/* flashattn::BlockPosition: the call computes query rows [query_start, query_start + seqlen_q) of a problem of
 * total_seqlen_q rows against its keys [key_start, key_start + seqlen_k) of total_seqlen_k (band, ALiBi and
 * dropout at those positions); a total of -1 means the call's own length. flashattn_attention_params_init
 * sets the whole problem: starts 0, totals -1. */
typedef struct flashattn_block_position {
  int64_t query_start;
  int64_t key_start;
  int64_t total_seqlen_q;
  int64_t total_seqlen_k;
} flashattn_block_position;

/* flashattn::AttentionParams. Q (batch, Nq, Hq, d), K (batch, Nk, Hkv, d), V (batch, Nk, Hkv, dv),
 * O (batch, Nq, Hq, dv); lse optional float32 (batch, Hq, Nq). */
typedef struct flashattn_attention_params {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;
  flashattn_strides q_strides, k_strides, v_strides, o_strides;

  int64_t batch;
  int64_t seqlen_q;
  int64_t seqlen_k;
  int64_t heads_q;
  int64_t heads_kv;
  int64_t head_dim;
  int64_t head_dim_v; /* dv; 0 = same as head_dim */
  flashattn_dtype dtype;

  flashattn_score_settings score;
  flashattn_mask mask;
  flashattn_block_mask block_mask;
  const int32_t* document_ids; /* int32 (batch, Nk), row stride document_ids_batch_stride (0 = Nk); NULL = none */
  int64_t document_ids_batch_stride;
  flashattn_key_selection key_indices; /* (batch, Nq, Hkv, k), contiguous; not with mask or dropout */

  float dropout_p; /* 0 = off */
  uint64_t dropout_seed;
  uint64_t dropout_offset;

  flashattn_block_position block_position;

  flashattn_tiling tiling;
  int num_threads; /* 0 = all cores */
} flashattn_attention_params;

/* flashattn::VarlenParams: sequences packed along one token axis. q (total_q, Hq, d), k (total_k, Hkv, d),
 * v (total_k, Hkv, dv), o (total_q, Hq, dv), lse optional float32 (Hq, total_q); cu_seqlens_q/_k int32
 * (batch + 1). Row and head strides of 0 mean contiguous. The score settings apply per sequence; sequence
 * b's dropout is that of a batch-1 problem at dropout_offset + b. Mask tensors are not supported here. */
typedef struct flashattn_varlen_params {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;
  int64_t q_row_stride, q_head_stride;
  int64_t k_row_stride, k_head_stride;
  int64_t v_row_stride, v_head_stride;
  int64_t o_row_stride, o_head_stride;

  int64_t batch;
  int64_t total_q;
  int64_t total_k;
  const int32_t* cu_seqlens_q;
  const int32_t* cu_seqlens_k;
  int64_t max_seqlen_q;
  int64_t max_seqlen_k;

  int64_t heads_q;
  int64_t heads_kv;
  int64_t head_dim;
  int64_t head_dim_v; /* 0 = same as head_dim */
  flashattn_dtype dtype;

  flashattn_score_settings score;

  float dropout_p; /* 0 = off */
  uint64_t dropout_seed;
  uint64_t dropout_offset;

  flashattn_tiling tiling;
  int num_threads;
} flashattn_varlen_params;

/* flashattn::MergeParams: o_partials float32 (num_partials, batch, seqlen, heads, dv) and lse_partials
 * float32 (num_partials, batch, heads, seqlen), contiguous; o of `dtype` through o_strides; lse optional;
 * sinks optional float32 (heads), each head's sink logit joining every row once. */
typedef struct flashattn_merge_params {
  const float* o_partials;
  const float* lse_partials;
  void* o;
  float* lse;
  flashattn_strides o_strides;
  int64_t num_partials;
  int64_t batch;
  int64_t seqlen;
  int64_t heads;
  int64_t head_dim_v;
  flashattn_dtype dtype;
  const float* sinks; /* NULL = none */
} flashattn_merge_params;

/* flashattn::DecodeParams (flash-attn's flash_attn_with_kvcache): a contiguous cache (block_table NULL,
 * cache_seqlen_max set) or a paged one (block_table int32 (batch, max_pages)); k_new/v_new appended in place
 * when seqlen_new > 0; rotary when rotary_dim > 0; packed queries of any count per sequence when
 * cu_seqlens_q is set (flash_attn_varlen_func over a cache). */
typedef struct flashattn_decode_params {
  const void* q;
  void* k_cache;
  void* v_cache;
  const void* k_new;
  const void* v_new;
  void* o;
  float* lse;
  const int32_t* cache_seqlens;
  const int32_t* keys_after; /* (batch): keys of each sequence held elsewhere after these; NULL = none */
  /* (batch + 1), non-decreasing from 0: packed queries, DecodeParams::cu_seqlens_q. q, o, k_new, v_new are
   * then (total_q, heads, dim), lse (heads_q, total_q), seqlen_q the largest sequence's count, seqlen_new 0
   * or seqlen_q; NULL = (batch, seqlen_q, ...) tensors. */
  const int32_t* cu_seqlens_q;
  flashattn_strides q_strides, cache_strides, new_strides, o_strides;

  int64_t batch;
  int64_t seqlen_q;
  int64_t seqlen_new;
  int64_t heads_q;
  int64_t heads_kv;
  int64_t head_dim;
  int64_t head_dim_v; /* dv; 0 = same as head_dim. v_cache == k_cache: V is the first dv features of K */
  flashattn_dtype dtype;
  flashattn_dtype cache_dtype;

  int64_t cache_seqlen_max;
  const int32_t* block_table;
  int64_t block_table_stride;
  int64_t max_pages;
  int64_t num_pages;
  int64_t page_size;

  const float* rotary_cos;
  const float* rotary_sin;
  int64_t rotary_dim;
  int64_t rotary_max_pos;
  bool rotary_interleaved;
  bool rotary_queries_at_cache_end; /* every query row rotated at cache_seqlens[b], not cache_seqlens[b] + i */

  flashattn_score_settings score;

  int64_t num_splits; /* 0 = flashattn_choose_num_splits's heuristic, 1 = no splitting */
  int num_threads;
  /* (batch, seqlen_q, Hkv, k) or packed (total_q, Hkv, k), contiguous: positions of the cache after the append */
  flashattn_key_selection key_indices;
  /* Forward's block mask and document ids in the call's coordinates (flashattn::DecodeParams): lists
   * (batch, heads, ceil(seqlen_q / Qb), width) over key blocks of the cache's logical positions; document_ids
   * int32 (batch, capacity), row stride document_ids_batch_stride (0 = capacity); NULL = none */
  flashattn_block_mask block_mask;
  const int32_t* document_ids;
  int64_t document_ids_batch_stride;

  /* A quantized cache (cache_element INT8, FP8_E4M3 or FP8_E5M2): k_scale and v_scale float32, shaped as
   * scale_granularity says, per-token ones with scale_strides (batch or page, seq, head) and a group stride
   * of 1; NULL for a float cache. quantize_query_int8: an int8 cache's scores from integer dot products of
   * int8-rounded queries (DecodeParams::quantize_query_int8). quantize_probs_u8: an int8 cache with one
   * scale per row, P̃V from integer dot products of u8-rounded weights (DecodeParams::quantize_probs_u8). */
  flashattn_cache_element cache_element;
  flashattn_scale_granularity scale_granularity;
  float* k_scale;
  float* v_scale;
  flashattn_strides scale_strides;
  int64_t scale_group_size; /* per token: features per scale, divides head_dim; 0 = head_dim */
  bool quantize_query_int8;
  bool quantize_probs_u8;
} flashattn_decode_params;

/* flashattn::IndexerParams (DeepSeek-V3.2's lightning indexer): for each query row t the top_k keys s by
 * I[t, s] = Σ_j weights[t, j]·ReLU(q[t, j]·k[s]); k one head (batch or page, seq, 1, head_dim), contiguous
 * (block_table NULL, cache_seqlen_max set) or paged; key_indices (batch, seqlen_q, 1, top_k) int32, −1 beyond
 * the keys a row sees; scores (optional) the same shape, float32. A quantized cache has one k_scale per key
 * row ((batch or page, seq), scale_strides.batch and .seq). cache_seqlens NULL: every sequence has
 * cache_seqlen_max keys (contiguous caches only). */
typedef struct flashattn_indexer_params {
  const void* q;
  const void* k_cache;
  const float* k_scale;
  const float* weights; /* (batch, seqlen_q, heads) float32, contiguous */
  int32_t* key_indices;
  float* scores; /* NULL = not written */
  const int32_t* cache_seqlens;
  flashattn_strides q_strides, cache_strides, scale_strides;

  int64_t batch;
  int64_t seqlen_q;
  int64_t heads;
  int64_t head_dim;
  flashattn_dtype dtype;
  flashattn_dtype cache_dtype;
  flashattn_cache_element cache_element;

  int64_t cache_seqlen_max;
  const int32_t* block_table;
  int64_t block_table_stride;
  int64_t max_pages;
  int64_t num_pages;
  int64_t page_size;

  int64_t top_k;
  bool causal; /* default true: row t of Nq over Nk keys sees the keys s ≤ t + Nk − Nq */
  int num_threads;
} flashattn_indexer_params;

/* flashattn::QuantizeParams: x (outer, seqlen, heads, head_dim) of dtype, all finite, quantized into values
 * (one byte per element) and scales, as decode reads them. */
typedef struct flashattn_quantize_params {
  const void* x;
  void* values;
  float* scales;
  flashattn_strides x_strides, value_strides, scale_strides;
  int64_t outer, seqlen, heads, head_dim;
  flashattn_dtype dtype;
  flashattn_cache_element element; /* INT8, FP8_E4M3 or FP8_E5M2 */
  flashattn_scale_granularity granularity;
  int64_t group_size; /* per token: features per scale, divides head_dim; 0 = head_dim */
} flashattn_quantize_params;

/* flashattn::BackwardParams: the forward call's parameters (o and lse are read; lse is required), dO and
 * the gradients dQ, dK, dV, each with its own strides. */
typedef struct flashattn_backward_params {
  flashattn_attention_params attention;
  const void* d_o;
  void* dq;
  void* dk;
  void* dv;
  flashattn_strides do_strides, dq_strides, dk_strides, dv_strides;
  float* dsinks; /* float32 (Hq), overwritten, when attention.score.sinks is set; NULL = not computed */
} flashattn_backward_params;

/* flashattn::VarlenBackwardParams: the forward_varlen call's parameters and packed gradients; row and head
 * strides of 0 mean contiguous. */
typedef struct flashattn_varlen_backward_params {
  flashattn_varlen_params forward;
  const void* d_o;
  void* dq;
  void* dk;
  void* dv;
  int64_t do_row_stride, do_head_stride;
  int64_t dq_row_stride, dq_head_stride;
  int64_t dk_row_stride, dk_head_stride;
  int64_t dv_row_stride, dv_head_stride;
  float* dsinks; /* as flashattn_backward_params.dsinks, summed over the sequences */
} flashattn_varlen_backward_params;

/* The library's version, "MAJOR.MINOR.PATCH" (the CMake project version). */
FLASHATTN_C_API const char* flashattn_version(void);

/* The message of the calling thread's last call: empty after a call that succeeded. Valid until the
 * thread's next call into the library. */
FLASHATTN_C_API const char* flashattn_last_error(void);

/* "ok", "invalid argument", "out of memory", "internal error" (or "unknown status"). */
FLASHATTN_C_API const char* flashattn_status_string(flashattn_status status);

/* The defaults, as the C++ structs' member initializers set them. A null pointer is ignored. */
FLASHATTN_C_API void flashattn_attention_params_init(flashattn_attention_params* params);
FLASHATTN_C_API void flashattn_varlen_params_init(flashattn_varlen_params* params);
FLASHATTN_C_API void flashattn_merge_params_init(flashattn_merge_params* params);
FLASHATTN_C_API void flashattn_decode_params_init(flashattn_decode_params* params);
FLASHATTN_C_API void flashattn_quantize_params_init(flashattn_quantize_params* params);
FLASHATTN_C_API void flashattn_indexer_params_init(flashattn_indexer_params* params);
FLASHATTN_C_API void flashattn_backward_params_init(flashattn_backward_params* params);
FLASHATTN_C_API void flashattn_varlen_backward_params_init(flashattn_varlen_backward_params* params);

/* Stride helpers: contiguous tensors in flash-attn's (batch, seq, head, dim) layout, or PyTorch's
 * (batch, head, seq, dim) for the head_major variants. The backward ones set the forward strides too. The
 * decode one sets packed (total_q, head, dim) strides for q, o, k_new and v_new, their batch strides 0, when
 * cu_seqlens_q is set. */
FLASHATTN_C_API void flashattn_attention_params_set_contiguous_strides(flashattn_attention_params* params);
FLASHATTN_C_API void flashattn_attention_params_set_head_major_strides(flashattn_attention_params* params);
FLASHATTN_C_API void flashattn_merge_params_set_contiguous_strides(flashattn_merge_params* params);
FLASHATTN_C_API void flashattn_decode_params_set_contiguous_strides(flashattn_decode_params* params);
FLASHATTN_C_API void flashattn_quantize_params_set_contiguous_strides(flashattn_quantize_params* params);
FLASHATTN_C_API void flashattn_indexer_params_set_contiguous_strides(flashattn_indexer_params* params);
FLASHATTN_C_API void flashattn_backward_params_set_contiguous_strides(flashattn_backward_params* params);
FLASHATTN_C_API void flashattn_backward_params_set_head_major_strides(flashattn_backward_params* params);

/* Checks a call without running it. */
FLASHATTN_C_API flashattn_status flashattn_validate_forward(const flashattn_attention_params* params);
FLASHATTN_C_API flashattn_status flashattn_validate_forward_varlen(const flashattn_varlen_params* params);
FLASHATTN_C_API flashattn_status flashattn_validate_merge(const flashattn_merge_params* params);
FLASHATTN_C_API flashattn_status flashattn_validate_decode(const flashattn_decode_params* params);
FLASHATTN_C_API flashattn_status flashattn_validate_lightning_indexer(const flashattn_indexer_params* params);
FLASHATTN_C_API flashattn_status flashattn_validate_backward(const flashattn_backward_params* params);
FLASHATTN_C_API flashattn_status flashattn_validate_backward_varlen(const flashattn_varlen_backward_params* params);

/* Writes O (and LSE if requested). */
FLASHATTN_C_API flashattn_status flashattn_forward(const flashattn_attention_params* params,
                                                   flashattn_algorithm algorithm);
FLASHATTN_C_API flashattn_status flashattn_forward_varlen(const flashattn_varlen_params* params,
                                                          flashattn_algorithm algorithm);
/* Merges partial results by their LSEs: LSE = log Σ e^{LSE_k}, O = Σ e^{LSE_k − LSE} O_k. */
FLASHATTN_C_API flashattn_status flashattn_merge_attention_states(const flashattn_merge_params* params);
/* Appends k_new/v_new to the cache (if any), then writes O (and LSE). On failure the cache is unchanged. */
FLASHATTN_C_API flashattn_status flashattn_decode(const flashattn_decode_params* params);
/* Writes each query row's top_k keys (and their scores) by the lightning indexer's score. */
FLASHATTN_C_API flashattn_status flashattn_lightning_indexer(const flashattn_indexer_params* params);
/* Fills a quantized cache and its scales from x (flashattn::quantize_kv); nothing is written on failure. */
FLASHATTN_C_API flashattn_status flashattn_quantize_kv(const flashattn_quantize_params* params);
/* The split count decode uses for num_splits = 0, in *num_splits. */
FLASHATTN_C_API flashattn_status flashattn_choose_num_splits(int64_t batch, int64_t max_seqlen_k, int num_threads,
                                                             int64_t* num_splits);
/* Writes dQ, dK, dV; deterministic for a given thread count. */
FLASHATTN_C_API flashattn_status flashattn_backward(const flashattn_backward_params* params,
                                                    flashattn_backward_algorithm algorithm);
FLASHATTN_C_API flashattn_status flashattn_backward_varlen(const flashattn_varlen_backward_params* params,
                                                           flashattn_backward_algorithm algorithm);
/* flashattn::create_block_mask into the caller's arrays: kv_num_blocks and full_kv_num_blocks hold
 * batch·ceil(seqlen_q/block_size_q) int32, kv_indices and full_kv_indices that many times
 * ceil(seqlen_k/block_size_k) (the lists' width). The block mask of causal, window (-1 unbounded) and
 * document ids (NULL = none; (batch, seqlen_k), row stride document_ids_batch_stride, 0 = seqlen_k); lists
 * sorted ascending, unused entries 0. */
FLASHATTN_C_API flashattn_status flashattn_create_block_mask(int64_t batch, int64_t seqlen_q, int64_t seqlen_k,
                                                             int64_t block_size_q, int64_t block_size_k, bool causal,
                                                             int64_t window_left, int64_t window_right,
                                                             const int32_t* document_ids,
                                                             int64_t document_ids_batch_stride,
                                                             int32_t* kv_num_blocks, int32_t* kv_indices,
                                                             int32_t* full_kv_num_blocks, int32_t* full_kv_indices);

/* The dropout keep mask of `params`: keep[((b·Hq + h)·Nq + i)·Nk + j] = 1 if kept, 0 if dropped. */
FLASHATTN_C_API flashattn_status flashattn_materialize_dropout_mask(const flashattn_attention_params* params,
                                                                    uint8_t* keep);
/* The dropout keep masks of every sequence, one after another: sequence b's is the (Hq, Nq_b, Nk_b) mask of its
 * batch-1 problem, starting at element Σ_{b' < b} Hq·Nq_b'·Nk_b'. */
FLASHATTN_C_API flashattn_status flashattn_materialize_dropout_mask_varlen(const flashattn_varlen_params* params,
                                                                           uint8_t* keep);

/* The kernels' working memory that calling threads keep between calls (include/flashattn/working_memory.h):
 * each keeps at most the limit, by default 64 MiB, until it ends. Setting the limit trims every thread's kept
 * memory to it at once (0 keeps none); release frees what every thread keeps; retained gives the bytes all
 * threads keep together. Thread-safe. */
FLASHATTN_C_API void flashattn_set_working_memory_limit(size_t bytes_per_thread);
FLASHATTN_C_API size_t flashattn_working_memory_limit(void);
FLASHATTN_C_API void flashattn_release_working_memory(void);
FLASHATTN_C_API size_t flashattn_retained_working_memory(void);

#ifdef __cplusplus
}
#endif

#endif /* FLASHATTN_C_API_H_ */
