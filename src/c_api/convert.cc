// The C structs turned into the C++ ones (convert.h): each field copied to the field of the same name, the
// score settings from the `score` member, head_dim_v 0 to unset.
#include "c_api/convert.h"

#include <cstdint>
#include <optional>

#include "common/checked.h"

namespace flashattn::c_api {
namespace {

// ---------------------------------------------------------------------------------------------------------
// Enums and small structs.

DType ToDType(const flashattn_dtype& dtype, const char* argument) {
  switch (RawValue(dtype)) {
    case FLASHATTN_DTYPE_F32: return DType::kF32;
    case FLASHATTN_DTYPE_F16: return DType::kF16;
    case FLASHATTN_DTYPE_BF16: return DType::kBF16;
  }
  Fail(argument, " must be FLASHATTN_DTYPE_F32, FLASHATTN_DTYPE_F16 or FLASHATTN_DTYPE_BF16, got ",
       RawValue(dtype));
}

MaskKind ToMaskKind(const flashattn_mask_kind& kind) {
  switch (RawValue(kind)) {
    case FLASHATTN_MASK_NONE: return MaskKind::kNone;
    case FLASHATTN_MASK_BOOL: return MaskKind::kBool;
    case FLASHATTN_MASK_ADDITIVE: return MaskKind::kAdditive;
  }
  Fail("mask.kind must be FLASHATTN_MASK_NONE, FLASHATTN_MASK_BOOL or FLASHATTN_MASK_ADDITIVE, got ",
       RawValue(kind));
}

CacheElement ToCacheElement(const flashattn_cache_element& element, const char* argument) {
  switch (RawValue(element)) {
    case FLASHATTN_CACHE_FLOAT: return CacheElement::kFloat;
    case FLASHATTN_CACHE_INT8: return CacheElement::kInt8;
    case FLASHATTN_CACHE_FP8_E4M3: return CacheElement::kFp8E4M3;
    case FLASHATTN_CACHE_FP8_E5M2: return CacheElement::kFp8E5M2;
  }
  Fail(argument, " must be FLASHATTN_CACHE_FLOAT, FLASHATTN_CACHE_INT8, FLASHATTN_CACHE_FP8_E4M3 or ",
       "FLASHATTN_CACHE_FP8_E5M2, got ", RawValue(element));
}

ScaleGranularity ToScaleGranularity(const flashattn_scale_granularity& granularity, const char* argument) {
  switch (RawValue(granularity)) {
    case FLASHATTN_SCALE_PER_TOKEN: return ScaleGranularity::kPerToken;
    case FLASHATTN_SCALE_PER_HEAD: return ScaleGranularity::kPerHead;
    case FLASHATTN_SCALE_PER_TENSOR: return ScaleGranularity::kPerTensor;
  }
  Fail(argument, " must be FLASHATTN_SCALE_PER_TOKEN, FLASHATTN_SCALE_PER_HEAD or FLASHATTN_SCALE_PER_TENSOR, got ",
       RawValue(granularity));
}

Strides ToStrides(const flashattn_strides& s) { return {s.batch, s.seq, s.head}; }
flashattn_strides FromStrides(const Strides& s) { return {s.batch, s.seq, s.head}; }

Tiling ToTiling(const flashattn_tiling& t) { return {t.fast_memory_bytes, t.block_rows, t.block_cols}; }

BlockPosition ToBlockPosition(const flashattn_block_position& b) {
  return {b.query_start, b.key_start, b.total_seqlen_q, b.total_seqlen_k};
}

BlockMask ToBlockMask(const flashattn_block_mask& m) {
  return {m.block_size_q,       m.block_size_k,    m.heads,        m.kv_num_blocks, m.kv_indices,
          m.kv_width,           m.full_kv_num_blocks, m.full_kv_indices, m.full_kv_width};
}

ScoreSettings ToCpp(const flashattn_score_settings& c) {
  ScoreSettings s;
  s.scale = c.has_scale ? std::optional<float>(c.scale) : std::nullopt;
  s.causal = c.causal, s.window_left = c.window_left, s.window_right = c.window_right, s.softcap = c.softcap;
  s.alibi_slopes = c.alibi_slopes, s.alibi_batch_stride = c.alibi_batch_stride;
  s.sinks = c.sinks;
  return s;
}

// The HeadSettings of flashattn_attention_params, flashattn_varlen_params and flashattn_decode_params, which
// name them alike.
template <typename CParams>
void SetHeadSettings(const CParams& c, HeadSettings& s) {
  static_cast<ScoreSettings&>(s) = ToCpp(c.score);
  s.heads_q = c.heads_q, s.heads_kv = c.heads_kv, s.head_dim = c.head_dim;
  s.head_dim_v = c.head_dim_v == 0 ? std::nullopt : std::optional<std::int64_t>(c.head_dim_v);
  s.dtype = ToDType(c.dtype, "dtype");
  s.num_threads = c.num_threads;
}

// The AttentionSettings of flashattn_attention_params and flashattn_varlen_params, but block_position, which
// only the first has.
template <typename CParams>
void SetAttentionSettings(const CParams& c, AttentionSettings& s) {
  SetHeadSettings(c, s);
  s.dropout_p = c.dropout_p, s.dropout_seed = c.dropout_seed, s.dropout_offset = c.dropout_offset;
  s.tiling = ToTiling(c.tiling);
}

flashattn_score_settings DefaultScore() {
  const ScoreSettings d;
  flashattn_score_settings c{};
  c.window_left = d.window_left, c.window_right = d.window_right;
  return c;
}

}  // namespace

Algorithm ToAlgorithm(const flashattn_algorithm& algorithm) {
  switch (RawValue(algorithm)) {
    case FLASHATTN_ALGORITHM_FUSED: return Algorithm::kFused;
    case FLASHATTN_ALGORITHM_STANDARD: return Algorithm::kStandard;
    case FLASHATTN_ALGORITHM_FLASH1: return Algorithm::kFlash1;
    case FLASHATTN_ALGORITHM_FLASH2: return Algorithm::kFlash2;
    case FLASHATTN_ALGORITHM_ORACLE: return Algorithm::kOracle;
  }
  Fail("algorithm must be a flashattn_algorithm (0 to 4), got ", RawValue(algorithm));
}

BackwardAlgorithm ToBackwardAlgorithm(const flashattn_backward_algorithm& algorithm) {
  switch (RawValue(algorithm)) {
    case FLASHATTN_BACKWARD_FUSED: return BackwardAlgorithm::kFused;
    case FLASHATTN_BACKWARD_STANDARD: return BackwardAlgorithm::kStandard;
    case FLASHATTN_BACKWARD_ORACLE: return BackwardAlgorithm::kOracle;
  }
  Fail("algorithm must be a flashattn_backward_algorithm (0 to 2), got ", RawValue(algorithm));
}

// ---------------------------------------------------------------------------------------------------------
// The parameter structs.

AttentionParams ToCpp(const flashattn_attention_params& c) {
  AttentionParams p;
  SetAttentionSettings(c, p);
  p.block_position = ToBlockPosition(c.block_position);
  p.q = c.q, p.k = c.k, p.v = c.v, p.o = c.o, p.lse = c.lse;
  p.q_strides = ToStrides(c.q_strides), p.k_strides = ToStrides(c.k_strides);
  p.v_strides = ToStrides(c.v_strides), p.o_strides = ToStrides(c.o_strides);
  p.batch = c.batch, p.seqlen_q = c.seqlen_q, p.seqlen_k = c.seqlen_k;
  p.mask = {ToMaskKind(c.mask.kind), c.mask.data, c.mask.stride_batch, c.mask.stride_head, c.mask.stride_row,
            c.mask.stride_col};
  p.block_mask = ToBlockMask(c.block_mask);
  p.document_ids = c.document_ids, p.document_ids_batch_stride = c.document_ids_batch_stride;
  p.key_indices = {c.key_indices.indices, c.key_indices.count};
  return p;
}

VarlenParams ToCpp(const flashattn_varlen_params& c) {
  VarlenParams p;
  SetAttentionSettings(c, p);
  p.q = c.q, p.k = c.k, p.v = c.v, p.o = c.o, p.lse = c.lse;
  p.q_row_stride = c.q_row_stride, p.q_head_stride = c.q_head_stride;
  p.k_row_stride = c.k_row_stride, p.k_head_stride = c.k_head_stride;
  p.v_row_stride = c.v_row_stride, p.v_head_stride = c.v_head_stride;
  p.o_row_stride = c.o_row_stride, p.o_head_stride = c.o_head_stride;
  p.batch = c.batch, p.total_q = c.total_q, p.total_k = c.total_k;
  p.cu_seqlens_q = c.cu_seqlens_q, p.cu_seqlens_k = c.cu_seqlens_k;
  p.max_seqlen_q = c.max_seqlen_q, p.max_seqlen_k = c.max_seqlen_k;
  return p;
}

MergeParams ToCpp(const flashattn_merge_params& c) {
  MergeParams p;
  p.o_partials = c.o_partials, p.lse_partials = c.lse_partials, p.o = c.o, p.lse = c.lse;
  p.o_strides = ToStrides(c.o_strides);
  p.num_partials = c.num_partials, p.batch = c.batch, p.seqlen = c.seqlen, p.heads = c.heads;
  p.head_dim_v = c.head_dim_v;
  p.dtype = ToDType(c.dtype, "dtype");
  p.sinks = c.sinks;
  return p;
}

DecodeParams ToCpp(const flashattn_decode_params& c) {
  DecodeParams p;
  SetHeadSettings(c, p);
  p.q = c.q, p.k_cache = c.k_cache, p.v_cache = c.v_cache, p.k_new = c.k_new, p.v_new = c.v_new;
  p.o = c.o, p.lse = c.lse, p.cache_seqlens = c.cache_seqlens, p.keys_after = c.keys_after;
  p.cu_seqlens_q = c.cu_seqlens_q;
  p.q_strides = ToStrides(c.q_strides), p.cache_strides = ToStrides(c.cache_strides);
  p.new_strides = ToStrides(c.new_strides), p.o_strides = ToStrides(c.o_strides);
  p.batch = c.batch, p.seqlen_q = c.seqlen_q, p.seqlen_new = c.seqlen_new;
  p.cache_dtype = ToDType(c.cache_dtype, "cache_dtype");
  p.cache_seqlen_max = c.cache_seqlen_max;
  p.block_table = c.block_table, p.block_table_stride = c.block_table_stride;
  p.max_pages = c.max_pages, p.num_pages = c.num_pages, p.page_size = c.page_size;
  p.rotary_cos = c.rotary_cos, p.rotary_sin = c.rotary_sin, p.rotary_dim = c.rotary_dim;
  p.rotary_max_pos = c.rotary_max_pos, p.rotary_interleaved = c.rotary_interleaved;
  p.rotary_queries_at_cache_end = c.rotary_queries_at_cache_end;
  p.num_splits = c.num_splits;
  p.key_indices = {c.key_indices.indices, c.key_indices.count};
  p.block_mask = ToBlockMask(c.block_mask);
  p.document_ids = c.document_ids, p.document_ids_batch_stride = c.document_ids_batch_stride;
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

IndexerParams ToCpp(const flashattn_indexer_params& c) {
  IndexerParams p;
  p.q = c.q, p.k_cache = c.k_cache, p.k_scale = c.k_scale, p.weights = c.weights;
  p.key_indices = c.key_indices, p.scores = c.scores, p.cache_seqlens = c.cache_seqlens;
  p.q_strides = ToStrides(c.q_strides), p.cache_strides = ToStrides(c.cache_strides);
  p.scale_strides = ToStrides(c.scale_strides);
  p.batch = c.batch, p.seqlen_q = c.seqlen_q, p.heads = c.heads, p.head_dim = c.head_dim;
  p.dtype = ToDType(c.dtype, "dtype");
  p.cache_dtype = ToDType(c.cache_dtype, "cache_dtype");
  p.cache_element = ToCacheElement(c.cache_element, "cache_element");
  p.cache_seqlen_max = c.cache_seqlen_max;
  p.block_table = c.block_table, p.block_table_stride = c.block_table_stride;
  p.max_pages = c.max_pages, p.num_pages = c.num_pages, p.page_size = c.page_size;
  p.top_k = c.top_k, p.causal = c.causal, p.num_threads = c.num_threads;
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

// ---------------------------------------------------------------------------------------------------------
// The strides back.

void CopyStrides(const AttentionParams& p, flashattn_attention_params& c) {
  c.q_strides = FromStrides(p.q_strides), c.k_strides = FromStrides(p.k_strides);
  c.v_strides = FromStrides(p.v_strides), c.o_strides = FromStrides(p.o_strides);
}

void CopyStrides(const MergeParams& p, flashattn_merge_params& c) { c.o_strides = FromStrides(p.o_strides); }

void CopyStrides(const DecodeParams& p, flashattn_decode_params& c) {
  c.q_strides = FromStrides(p.q_strides), c.cache_strides = FromStrides(p.cache_strides);
  c.new_strides = FromStrides(p.new_strides), c.o_strides = FromStrides(p.o_strides);
  c.scale_strides = FromStrides(p.scale_strides);
}

void CopyStrides(const QuantizeParams& p, flashattn_quantize_params& c) {
  c.x_strides = FromStrides(p.x_strides), c.value_strides = FromStrides(p.value_strides);
  c.scale_strides = FromStrides(p.scale_strides);
}

void CopyStrides(const IndexerParams& p, flashattn_indexer_params& c) {
  c.q_strides = FromStrides(p.q_strides), c.cache_strides = FromStrides(p.cache_strides);
  c.scale_strides = FromStrides(p.scale_strides);
}

void CopyStrides(const BackwardParams& p, flashattn_backward_params& c) {
  CopyStrides(p.attention, c.attention);
  c.do_strides = FromStrides(p.do_strides), c.dq_strides = FromStrides(p.dq_strides);
  c.dk_strides = FromStrides(p.dk_strides), c.dv_strides = FromStrides(p.dv_strides);
}

// ---------------------------------------------------------------------------------------------------------
// The defaults.

flashattn_attention_params DefaultAttention() {
  const AttentionParams d;
  flashattn_attention_params c{};
  c.batch = d.batch, c.heads_q = d.heads_q, c.heads_kv = d.heads_kv;
  c.score = DefaultScore();
  c.mask.stride_col = d.mask.stride_col;
  c.block_mask.block_size_q = d.block_mask.block_size_q, c.block_mask.block_size_k = d.block_mask.block_size_k;
  c.block_mask.heads = d.block_mask.heads;
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

flashattn_merge_params DefaultMerge() {
  const MergeParams d;
  flashattn_merge_params c{};
  c.batch = d.batch, c.heads = d.heads;
  return c;
}

flashattn_decode_params DefaultDecode() {
  const DecodeParams d;
  flashattn_decode_params c{};
  c.batch = d.batch, c.heads_q = d.heads_q, c.heads_kv = d.heads_kv;
  c.score = DefaultScore();
  c.block_mask.block_size_q = d.block_mask.block_size_q, c.block_mask.block_size_k = d.block_mask.block_size_k;
  c.block_mask.heads = d.block_mask.heads;
  return c;
}

flashattn_quantize_params DefaultQuantize() {
  const QuantizeParams d;
  flashattn_quantize_params c{};
  c.outer = d.outer, c.heads = d.heads;
  c.element = FLASHATTN_CACHE_INT8;
  return c;
}

flashattn_indexer_params DefaultIndexer() {
  const IndexerParams d;
  flashattn_indexer_params c{};
  c.batch = d.batch, c.heads = d.heads, c.causal = d.causal;
  return c;
}

flashattn_backward_params DefaultBackward() {
  flashattn_backward_params c{};
  c.attention = DefaultAttention();
  return c;
}

flashattn_varlen_backward_params DefaultVarlenBackward() {
  flashattn_varlen_backward_params c{};
  c.forward = DefaultVarlen();
  return c;
}

}  // namespace flashattn::c_api
