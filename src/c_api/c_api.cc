// The C API (include/flashattn/c_api.h) over the C++ one. Each C struct is converted field by field into its
// C++ counterpart (this file is the only place that knows both), and each call runs inside Guarded(), which
// turns every exception into a status and keeps its message for flashattn_last_error(). The C++ entry points
// validate before they write, so a failed call leaves the caller's memory as it was.
#include "flashattn/c_api.h"

#include <exception>
#include <new>
#include <optional>
#include <string>

#include "common/checked.h"
#include "flashattn/backward.h"
#include "flashattn/decode.h"
#include "flashattn/flashattn.h"

namespace flashattn {
namespace {

// The calling thread's last message. `last_error_text` points into `last_error` or, if keeping the message
// failed for want of memory, at a fixed text.
thread_local std::string last_error;
thread_local const char* last_error_text = "";

void SetLastError(const char* message) noexcept {
  try {
    last_error = message;
    last_error_text = last_error.c_str();
  } catch (...) {
    last_error_text = "out of memory (the original error message could not be kept)";
  }
}

template <typename Call>
flashattn_status Guarded(const Call& call) noexcept {
  try {
    call();
    SetLastError("");
    return FLASHATTN_OK;
  } catch (const Error& error) {
    SetLastError(error.what());
    return FLASHATTN_ERROR_INVALID_ARGUMENT;
  } catch (const std::bad_alloc&) {
    SetLastError("out of memory");
    return FLASHATTN_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception& error) {
    SetLastError(error.what());
    return FLASHATTN_ERROR_INTERNAL;
  } catch (...) {
    SetLastError("an exception that is not a std::exception");
    return FLASHATTN_ERROR_INTERNAL;
  }
}

template <typename T>
const T& Deref(const T* params) {
  if (params == nullptr) Fail("params must not be null");
  return *params;
}

// ---------------------------------------------------------------------------------------------------------
// Enums and small structs. A C enum can hold any int, so each conversion rejects values it does not know.

DType ToDType(flashattn_dtype dtype, const char* argument) {
  switch (dtype) {
    case FLASHATTN_DTYPE_F32: return DType::kF32;
    case FLASHATTN_DTYPE_F16: return DType::kF16;
    case FLASHATTN_DTYPE_BF16: return DType::kBF16;
  }
  Fail(argument, " must be FLASHATTN_DTYPE_F32, FLASHATTN_DTYPE_F16 or FLASHATTN_DTYPE_BF16, got ",
       static_cast<int>(dtype));
}

Algorithm ToAlgorithm(flashattn_algorithm algorithm) {
  switch (algorithm) {
    case FLASHATTN_ALGORITHM_FUSED: return Algorithm::kFused;
    case FLASHATTN_ALGORITHM_STANDARD: return Algorithm::kStandard;
    case FLASHATTN_ALGORITHM_FLASH1: return Algorithm::kFlash1;
    case FLASHATTN_ALGORITHM_FLASH2: return Algorithm::kFlash2;
    case FLASHATTN_ALGORITHM_ORACLE: return Algorithm::kOracle;
  }
  Fail("algorithm must be a flashattn_algorithm (0 to 4), got ", static_cast<int>(algorithm));
}

BackwardAlgorithm ToBackwardAlgorithm(flashattn_backward_algorithm algorithm) {
  switch (algorithm) {
    case FLASHATTN_BACKWARD_FUSED: return BackwardAlgorithm::kFused;
    case FLASHATTN_BACKWARD_STANDARD: return BackwardAlgorithm::kStandard;
    case FLASHATTN_BACKWARD_ORACLE: return BackwardAlgorithm::kOracle;
  }
  Fail("algorithm must be a flashattn_backward_algorithm (0 to 2), got ", static_cast<int>(algorithm));
}

MaskKind ToMaskKind(flashattn_mask_kind kind) {
  switch (kind) {
    case FLASHATTN_MASK_NONE: return MaskKind::kNone;
    case FLASHATTN_MASK_BOOL: return MaskKind::kBool;
    case FLASHATTN_MASK_ADDITIVE: return MaskKind::kAdditive;
  }
  Fail("mask.kind must be FLASHATTN_MASK_NONE, FLASHATTN_MASK_BOOL or FLASHATTN_MASK_ADDITIVE, got ",
       static_cast<int>(kind));
}

CacheElement ToCacheElement(flashattn_cache_element element, const char* argument) {
  switch (element) {
    case FLASHATTN_CACHE_FLOAT: return CacheElement::kFloat;
    case FLASHATTN_CACHE_INT8: return CacheElement::kInt8;
    case FLASHATTN_CACHE_FP8_E4M3: return CacheElement::kFp8E4M3;
    case FLASHATTN_CACHE_FP8_E5M2: return CacheElement::kFp8E5M2;
  }
  Fail(argument, " must be FLASHATTN_CACHE_FLOAT, FLASHATTN_CACHE_INT8, FLASHATTN_CACHE_FP8_E4M3 or ",
       "FLASHATTN_CACHE_FP8_E5M2, got ", static_cast<int>(element));
}

ScaleGranularity ToScaleGranularity(flashattn_scale_granularity granularity, const char* argument) {
  switch (granularity) {
    case FLASHATTN_SCALE_PER_TOKEN: return ScaleGranularity::kPerToken;
    case FLASHATTN_SCALE_PER_HEAD: return ScaleGranularity::kPerHead;
    case FLASHATTN_SCALE_PER_TENSOR: return ScaleGranularity::kPerTensor;
  }
  Fail(argument, " must be FLASHATTN_SCALE_PER_TOKEN, FLASHATTN_SCALE_PER_HEAD or FLASHATTN_SCALE_PER_TENSOR, got ",
       static_cast<int>(granularity));
}

Strides ToStrides(const flashattn_strides& s) { return {s.batch, s.seq, s.head}; }
flashattn_strides FromStrides(const Strides& s) { return {s.batch, s.seq, s.head}; }

Tiling ToTiling(const flashattn_tiling& t) { return {t.fast_memory_bytes, t.block_rows, t.block_cols}; }

std::optional<std::int64_t> ToHeadDimV(std::int64_t head_dim_v) {
  return head_dim_v == 0 ? std::nullopt : std::optional<std::int64_t>(head_dim_v);
}

ScoreSettings ToCpp(const flashattn_score_settings& c) {
  ScoreSettings s;
  s.scale = c.has_scale ? std::optional<float>(c.scale) : std::nullopt;
  s.causal = c.causal, s.window_left = c.window_left, s.window_right = c.window_right, s.softcap = c.softcap;
  s.alibi_slopes = c.alibi_slopes, s.alibi_batch_stride = c.alibi_batch_stride;
  s.sinks = c.sinks;
  return s;
}

// The AttentionSettings of flashattn_attention_params and flashattn_varlen_params, which name them alike.
template <typename CParams>
void SetAttentionSettings(const CParams& c, AttentionSettings& s) {
  static_cast<ScoreSettings&>(s) = ToCpp(c.score);
  s.heads_q = c.heads_q, s.heads_kv = c.heads_kv, s.head_dim = c.head_dim, s.head_dim_v = ToHeadDimV(c.head_dim_v);
  s.dtype = ToDType(c.dtype, "dtype");
  s.dropout_p = c.dropout_p, s.dropout_seed = c.dropout_seed, s.dropout_offset = c.dropout_offset;
  s.tiling = ToTiling(c.tiling);
  s.num_threads = c.num_threads;
}

// ---------------------------------------------------------------------------------------------------------
// The parameter structs.

AttentionParams ToCpp(const flashattn_attention_params& c) {
  AttentionParams p;
  p.q = c.q, p.k = c.k, p.v = c.v, p.o = c.o, p.lse = c.lse;
  p.q_strides = ToStrides(c.q_strides), p.k_strides = ToStrides(c.k_strides);
  p.v_strides = ToStrides(c.v_strides), p.o_strides = ToStrides(c.o_strides);
  p.batch = c.batch, p.seqlen_q = c.seqlen_q, p.seqlen_k = c.seqlen_k;
  p.mask = {ToMaskKind(c.mask.kind), c.mask.data, c.mask.stride_batch, c.mask.stride_head, c.mask.stride_row,
            c.mask.stride_col};
  SetAttentionSettings(c, p);
  p.block_position = {c.block_position.query_start, c.block_position.key_start, c.block_position.total_seqlen_q,
                      c.block_position.total_seqlen_k};
  return p;
}

VarlenParams ToCpp(const flashattn_varlen_params& c) {
  VarlenParams p;
  p.q = c.q, p.k = c.k, p.v = c.v, p.o = c.o, p.lse = c.lse;
  p.q_row_stride = c.q_row_stride, p.q_head_stride = c.q_head_stride;
  p.k_row_stride = c.k_row_stride, p.k_head_stride = c.k_head_stride;
  p.v_row_stride = c.v_row_stride, p.v_head_stride = c.v_head_stride;
  p.o_row_stride = c.o_row_stride, p.o_head_stride = c.o_head_stride;
  p.batch = c.batch, p.total_q = c.total_q, p.total_k = c.total_k;
  p.cu_seqlens_q = c.cu_seqlens_q, p.cu_seqlens_k = c.cu_seqlens_k;
  p.max_seqlen_q = c.max_seqlen_q, p.max_seqlen_k = c.max_seqlen_k;
  SetAttentionSettings(c, p);
  return p;
}

MergeParams ToCpp(const flashattn_merge_params& c) {
  MergeParams p;
  p.o_partials = c.o_partials, p.lse_partials = c.lse_partials, p.o = c.o, p.lse = c.lse;
  p.o_strides = ToStrides(c.o_strides);
  p.num_partials = c.num_partials, p.batch = c.batch, p.seqlen = c.seqlen, p.heads = c.heads;
  p.head_dim_v = c.head_dim_v;
  p.dtype = ToDType(c.dtype, "dtype");
  return p;
}

DecodeParams ToCpp(const flashattn_decode_params& c) {
  DecodeParams p;
  p.q = c.q, p.k_cache = c.k_cache, p.v_cache = c.v_cache, p.k_new = c.k_new, p.v_new = c.v_new;
  p.o = c.o, p.lse = c.lse, p.cache_seqlens = c.cache_seqlens, p.keys_after = c.keys_after;
  p.q_strides = ToStrides(c.q_strides), p.cache_strides = ToStrides(c.cache_strides);
  p.new_strides = ToStrides(c.new_strides), p.o_strides = ToStrides(c.o_strides);
  p.batch = c.batch, p.seqlen_q = c.seqlen_q, p.seqlen_new = c.seqlen_new;
  p.heads_q = c.heads_q, p.heads_kv = c.heads_kv, p.head_dim = c.head_dim, p.head_dim_v = ToHeadDimV(c.head_dim_v);
  p.dtype = ToDType(c.dtype, "dtype");
  p.cache_dtype = ToDType(c.cache_dtype, "cache_dtype");
  p.cache_seqlen_max = c.cache_seqlen_max;
  p.block_table = c.block_table, p.block_table_stride = c.block_table_stride;
  p.max_pages = c.max_pages, p.num_pages = c.num_pages, p.page_size = c.page_size;
  p.rotary_cos = c.rotary_cos, p.rotary_sin = c.rotary_sin, p.rotary_dim = c.rotary_dim;
  p.rotary_max_pos = c.rotary_max_pos, p.rotary_interleaved = c.rotary_interleaved;
  p.rotary_queries_at_cache_end = c.rotary_queries_at_cache_end;
  static_cast<ScoreSettings&>(p) = ToCpp(c.score);
  p.num_splits = c.num_splits;
  p.num_threads = c.num_threads;
  p.cache_element = ToCacheElement(c.cache_element, "cache_element");
  p.scale_granularity = ToScaleGranularity(c.scale_granularity, "scale_granularity");
  p.k_scale = c.k_scale, p.v_scale = c.v_scale, p.scale_strides = ToStrides(c.scale_strides);
  p.scale_group_size = c.scale_group_size;
  p.quantize_query_int8 = c.quantize_query_int8;
  p.quantize_probs_u8 = c.quantize_probs_u8;
  return p;
}

QuantizeParams ToCpp(const flashattn_quantize_params& c) {
  QuantizeParams p;
  p.x = c.x, p.values = c.values, p.scales = c.scales;
  p.x_strides = ToStrides(c.x_strides), p.value_strides = ToStrides(c.value_strides);
  p.scale_strides = ToStrides(c.scale_strides);
  p.outer = c.outer, p.seqlen = c.seqlen, p.heads = c.heads, p.head_dim = c.head_dim;
  p.dtype = ToDType(c.dtype, "dtype");
  p.element = ToCacheElement(c.element, "element");
  p.granularity = ToScaleGranularity(c.granularity, "granularity");
  p.group_size = c.group_size;
  return p;
}

BackwardParams ToCpp(const flashattn_backward_params& c) {
  BackwardParams p;
  p.attention = ToCpp(c.attention);
  p.d_o = c.d_o, p.dq = c.dq, p.dk = c.dk, p.dv = c.dv;
  p.do_strides = ToStrides(c.do_strides), p.dq_strides = ToStrides(c.dq_strides);
  p.dk_strides = ToStrides(c.dk_strides), p.dv_strides = ToStrides(c.dv_strides);
  p.dsinks = c.dsinks;
  return p;
}

VarlenBackwardParams ToCpp(const flashattn_varlen_backward_params& c) {
  VarlenBackwardParams p;
  p.forward = ToCpp(c.forward);
  p.d_o = c.d_o, p.dq = c.dq, p.dk = c.dk, p.dv = c.dv;
  p.do_row_stride = c.do_row_stride, p.do_head_stride = c.do_head_stride;
  p.dq_row_stride = c.dq_row_stride, p.dq_head_stride = c.dq_head_stride;
  p.dk_row_stride = c.dk_row_stride, p.dk_head_stride = c.dk_head_stride;
  p.dv_row_stride = c.dv_row_stride, p.dv_head_stride = c.dv_head_stride;
  p.dsinks = c.dsinks;
  return p;
}

// The defaults: zero, except the fields whose C++ member initializer is not zero.
flashattn_score_settings DefaultScore() {
  const ScoreSettings d;
  flashattn_score_settings c{};
  c.window_left = d.window_left, c.window_right = d.window_right;
  return c;
}

flashattn_attention_params DefaultAttention() {
  const AttentionParams d;
  flashattn_attention_params c{};
  c.batch = d.batch, c.heads_q = d.heads_q, c.heads_kv = d.heads_kv;
  c.score = DefaultScore();
  c.mask.stride_col = d.mask.stride_col;
  c.block_position = {d.block_position.query_start, d.block_position.key_start, d.block_position.total_seqlen_q,
                      d.block_position.total_seqlen_k};
  return c;
}

flashattn_varlen_params DefaultVarlen() {
  const VarlenParams d;
  flashattn_varlen_params c{};
  c.batch = d.batch, c.heads_q = d.heads_q, c.heads_kv = d.heads_kv;
  c.score = DefaultScore();
  return c;
}

// validate() of the C++ counterpart of a C parameter struct.
template <typename CParams>
flashattn_status Validate(const CParams* params) noexcept {
  return Guarded([&] { validate(ToCpp(Deref(params))); });
}

// The strides the C++ helpers compute from the sizes alone, copied back into the C struct.
void SetAttentionStrides(flashattn_attention_params& c, bool head_major) {
  AttentionParams p;
  p.seqlen_q = c.seqlen_q, p.seqlen_k = c.seqlen_k, p.heads_q = c.heads_q, p.heads_kv = c.heads_kv;
  p.head_dim = c.head_dim, p.head_dim_v = ToHeadDimV(c.head_dim_v);
  head_major ? p.set_head_major_strides() : p.set_contiguous_strides();
  c.q_strides = FromStrides(p.q_strides), c.k_strides = FromStrides(p.k_strides);
  c.v_strides = FromStrides(p.v_strides), c.o_strides = FromStrides(p.o_strides);
}

// The gradients have the layout of the tensor they belong to: dO of O, dQ of Q, dK of K, dV of V.
void SetBackwardStrides(flashattn_backward_params& c, bool head_major) {
  SetAttentionStrides(c.attention, head_major);
  c.do_strides = c.attention.o_strides, c.dq_strides = c.attention.q_strides;
  c.dk_strides = c.attention.k_strides, c.dv_strides = c.attention.v_strides;
}

}  // namespace
}  // namespace flashattn

using namespace flashattn;

extern "C" {

const char* flashattn_version(void) { return FLASHATTN_VERSION; }

const char* flashattn_last_error(void) { return last_error_text; }

const char* flashattn_status_string(flashattn_status status) {
  switch (status) {
    case FLASHATTN_OK: return "ok";
    case FLASHATTN_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case FLASHATTN_ERROR_OUT_OF_MEMORY: return "out of memory";
    case FLASHATTN_ERROR_INTERNAL: return "internal error";
  }
  return "unknown status";
}

void flashattn_attention_params_init(flashattn_attention_params* params) {
  if (params) *params = DefaultAttention();
}

void flashattn_varlen_params_init(flashattn_varlen_params* params) {
  if (params) *params = DefaultVarlen();
}

void flashattn_merge_params_init(flashattn_merge_params* params) {
  if (!params) return;
  const MergeParams d;
  *params = {};
  params->batch = d.batch, params->heads = d.heads;
}

void flashattn_decode_params_init(flashattn_decode_params* params) {
  if (!params) return;
  const DecodeParams d;
  *params = {};
  params->batch = d.batch, params->heads_q = d.heads_q, params->heads_kv = d.heads_kv;
  params->score = DefaultScore();
}

void flashattn_quantize_params_init(flashattn_quantize_params* params) {
  if (!params) return;
  const QuantizeParams d;
  *params = {};
  params->outer = d.outer, params->heads = d.heads;
  params->element = FLASHATTN_CACHE_INT8;
}

void flashattn_backward_params_init(flashattn_backward_params* params) {
  if (!params) return;
  *params = {};
  params->attention = DefaultAttention();
}

void flashattn_varlen_backward_params_init(flashattn_varlen_backward_params* params) {
  if (!params) return;
  *params = {};
  params->forward = DefaultVarlen();
}

void flashattn_attention_params_set_contiguous_strides(flashattn_attention_params* params) {
  if (params) SetAttentionStrides(*params, false);
}

void flashattn_attention_params_set_head_major_strides(flashattn_attention_params* params) {
  if (params) SetAttentionStrides(*params, true);
}

void flashattn_merge_params_set_contiguous_strides(flashattn_merge_params* params) {
  if (!params) return;
  MergeParams p;
  p.seqlen = params->seqlen, p.heads = params->heads, p.head_dim_v = params->head_dim_v;
  p.set_contiguous_strides();
  params->o_strides = FromStrides(p.o_strides);
}

void flashattn_decode_params_set_contiguous_strides(flashattn_decode_params* params) {
  if (!params) return;
  DecodeParams p;
  p.seqlen_q = params->seqlen_q, p.seqlen_new = params->seqlen_new, p.heads_q = params->heads_q;
  p.heads_kv = params->heads_kv, p.head_dim = params->head_dim, p.cache_seqlen_max = params->cache_seqlen_max;
  p.block_table = params->block_table, p.page_size = params->page_size;
  p.scale_group_size = params->scale_group_size;
  p.set_contiguous_strides();
  params->q_strides = FromStrides(p.q_strides), params->cache_strides = FromStrides(p.cache_strides);
  params->new_strides = FromStrides(p.new_strides), params->o_strides = FromStrides(p.o_strides);
  params->scale_strides = FromStrides(p.scale_strides);
}

void flashattn_quantize_params_set_contiguous_strides(flashattn_quantize_params* params) {
  if (!params) return;
  QuantizeParams p;
  p.outer = params->outer, p.seqlen = params->seqlen, p.heads = params->heads, p.head_dim = params->head_dim;
  p.group_size = params->group_size;
  p.set_contiguous_strides();
  params->x_strides = FromStrides(p.x_strides), params->value_strides = FromStrides(p.value_strides);
  params->scale_strides = FromStrides(p.scale_strides);
}

void flashattn_backward_params_set_contiguous_strides(flashattn_backward_params* params) {
  if (params) SetBackwardStrides(*params, false);
}

void flashattn_backward_params_set_head_major_strides(flashattn_backward_params* params) {
  if (params) SetBackwardStrides(*params, true);
}

flashattn_status flashattn_validate_forward(const flashattn_attention_params* params) {
  return Validate(params);
}

flashattn_status flashattn_validate_forward_varlen(const flashattn_varlen_params* params) {
  return Validate(params);
}

flashattn_status flashattn_validate_merge(const flashattn_merge_params* params) {
  return Validate(params);
}

flashattn_status flashattn_validate_decode(const flashattn_decode_params* params) {
  return Validate(params);
}

flashattn_status flashattn_validate_backward(const flashattn_backward_params* params) {
  return Validate(params);
}

flashattn_status flashattn_validate_backward_varlen(const flashattn_varlen_backward_params* params) {
  return Validate(params);
}

flashattn_status flashattn_forward(const flashattn_attention_params* params, flashattn_algorithm algorithm) {
  return Guarded([&] { forward(ToCpp(Deref(params)), ToAlgorithm(algorithm)); });
}

flashattn_status flashattn_forward_varlen(const flashattn_varlen_params* params, flashattn_algorithm algorithm) {
  return Guarded([&] { forward_varlen(ToCpp(Deref(params)), ToAlgorithm(algorithm)); });
}

flashattn_status flashattn_merge_attention_states(const flashattn_merge_params* params) {
  return Guarded([&] { merge_attention_states(ToCpp(Deref(params))); });
}

flashattn_status flashattn_decode(const flashattn_decode_params* params) {
  return Guarded([&] { decode(ToCpp(Deref(params))); });
}

flashattn_status flashattn_quantize_kv(const flashattn_quantize_params* params) {
  return Guarded([&] { quantize_kv(ToCpp(Deref(params))); });
}

flashattn_status flashattn_choose_num_splits(int64_t batch, int64_t max_seqlen_k, int num_threads,
                                             int64_t* num_splits) {
  return Guarded([&] {
    if (num_splits == nullptr) Fail("num_splits must not be null");
    *num_splits = choose_num_splits(batch, max_seqlen_k, num_threads);
  });
}

flashattn_status flashattn_backward(const flashattn_backward_params* params,
                                    flashattn_backward_algorithm algorithm) {
  return Guarded([&] { backward(ToCpp(Deref(params)), ToBackwardAlgorithm(algorithm)); });
}

flashattn_status flashattn_backward_varlen(const flashattn_varlen_backward_params* params,
                                           flashattn_backward_algorithm algorithm) {
  return Guarded([&] { backward_varlen(ToCpp(Deref(params)), ToBackwardAlgorithm(algorithm)); });
}

flashattn_status flashattn_materialize_dropout_mask(const flashattn_attention_params* params, uint8_t* keep) {
  return Guarded([&] { materialize_dropout_mask(ToCpp(Deref(params)), keep); });
}

flashattn_status flashattn_materialize_dropout_mask_varlen(const flashattn_varlen_params* params, uint8_t* keep) {
  return Guarded([&] { materialize_dropout_mask(ToCpp(Deref(params)), keep); });
}

}  // extern "C"
