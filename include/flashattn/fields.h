// Every field of the public parameter structs, by name: for_each_field(params, visit) calls
// visit(name, field) once per field, in declaration order, the inherited fields first. `field` is a reference
// to the member (const when `params` is). The fields of a member struct (Strides, Tiling, BlockPosition,
// MaskTensor, KeySelection, BackwardParams::attention, VarlenBackwardParams::forward) are visited one by one
// under a dotted name: "q_strides.batch", "tiling.block_rows", "attention.causal". For bindings, logs and tests: the C API's
// tests hold its structs to these names (tests/c_api_fields_test.cc, which also fails when a field of a
// struct is missing here), and the Python bindings' echo of the parameters reports them.
#ifndef FLASHATTN_FIELDS_H_
#define FLASHATTN_FIELDS_H_

#include <concepts>
#include <string>
#include <type_traits>

#include "flashattn/backward.h"
#include "flashattn/decode.h"
#include "flashattn/forward.h"
#include "flashattn/indexer.h"
#include "flashattn/merge.h"
#include "flashattn/types.h"
#include "flashattn/varlen.h"

namespace flashattn {

namespace fields_detail {

// S is T or const T.
template <class S, class T>
concept Is = std::same_as<std::remove_const_t<S>, T>;

// S's base class B, with S's constness.
template <class B, class S>
using Base = std::conditional_t<std::is_const_v<S>, const B, B>;

}  // namespace fields_detail

template <fields_detail::Is<Strides> S, class Visit>
void for_each_field(S& s, Visit&& visit, const std::string& prefix = "") {
  visit(prefix + "batch", s.batch);
  visit(prefix + "seq", s.seq);
  visit(prefix + "head", s.head);
}

template <fields_detail::Is<Tiling> S, class Visit>
void for_each_field(S& s, Visit&& visit, const std::string& prefix = "") {
  visit(prefix + "fast_memory_bytes", s.fast_memory_bytes);
  visit(prefix + "block_rows", s.block_rows);
  visit(prefix + "block_cols", s.block_cols);
}

template <fields_detail::Is<BlockPosition> S, class Visit>
void for_each_field(S& s, Visit&& visit, const std::string& prefix = "") {
  visit(prefix + "query_start", s.query_start);
  visit(prefix + "key_start", s.key_start);
  visit(prefix + "total_seqlen_q", s.total_seqlen_q);
  visit(prefix + "total_seqlen_k", s.total_seqlen_k);
}

template <fields_detail::Is<MaskTensor> S, class Visit>
void for_each_field(S& s, Visit&& visit, const std::string& prefix = "") {
  visit(prefix + "kind", s.kind);
  visit(prefix + "data", s.data);
  visit(prefix + "stride_batch", s.stride_batch);
  visit(prefix + "stride_head", s.stride_head);
  visit(prefix + "stride_row", s.stride_row);
  visit(prefix + "stride_col", s.stride_col);
}

template <fields_detail::Is<BlockMask> S, class Visit>
void for_each_field(S& s, Visit&& visit, const std::string& prefix = "") {
  visit(prefix + "block_size_q", s.block_size_q);
  visit(prefix + "block_size_k", s.block_size_k);
  visit(prefix + "heads", s.heads);
  visit(prefix + "kv_num_blocks", s.kv_num_blocks);
  visit(prefix + "kv_indices", s.kv_indices);
  visit(prefix + "kv_width", s.kv_width);
  visit(prefix + "full_kv_num_blocks", s.full_kv_num_blocks);
  visit(prefix + "full_kv_indices", s.full_kv_indices);
  visit(prefix + "full_kv_width", s.full_kv_width);
}

template <fields_detail::Is<KeySelection> S, class Visit>
void for_each_field(S& s, Visit&& visit, const std::string& prefix = "") {
  visit(prefix + "indices", s.indices);
  visit(prefix + "count", s.count);
}

template <fields_detail::Is<ScoreSettings> S, class Visit>
void for_each_field(S& s, Visit&& visit, const std::string& prefix = "") {
  visit(prefix + "scale", s.scale);
  visit(prefix + "causal", s.causal);
  visit(prefix + "window_left", s.window_left);
  visit(prefix + "window_right", s.window_right);
  visit(prefix + "softcap", s.softcap);
  visit(prefix + "alibi_slopes", s.alibi_slopes);
  visit(prefix + "alibi_batch_stride", s.alibi_batch_stride);
  visit(prefix + "sinks", s.sinks);
}

template <fields_detail::Is<HeadSettings> S, class Visit>
void for_each_field(S& s, Visit&& visit, const std::string& prefix = "") {
  for_each_field(static_cast<fields_detail::Base<ScoreSettings, S>&>(s), visit, prefix);
  visit(prefix + "heads_q", s.heads_q);
  visit(prefix + "heads_kv", s.heads_kv);
  visit(prefix + "head_dim", s.head_dim);
  visit(prefix + "head_dim_v", s.head_dim_v);
  visit(prefix + "dtype", s.dtype);
  visit(prefix + "num_threads", s.num_threads);
}

template <fields_detail::Is<AttentionSettings> S, class Visit>
void for_each_field(S& s, Visit&& visit, const std::string& prefix = "") {
  for_each_field(static_cast<fields_detail::Base<HeadSettings, S>&>(s), visit, prefix);
  visit(prefix + "dropout_p", s.dropout_p);
  visit(prefix + "dropout_seed", s.dropout_seed);
  visit(prefix + "dropout_offset", s.dropout_offset);
  for_each_field(s.block_position, visit, prefix + "block_position.");
  for_each_field(s.tiling, visit, prefix + "tiling.");
}

template <fields_detail::Is<AttentionParams> S, class Visit>
void for_each_field(S& s, Visit&& visit, const std::string& prefix = "") {
  for_each_field(static_cast<fields_detail::Base<AttentionSettings, S>&>(s), visit, prefix);
  visit(prefix + "q", s.q);
  visit(prefix + "k", s.k);
  visit(prefix + "v", s.v);
  visit(prefix + "o", s.o);
  visit(prefix + "lse", s.lse);
  for_each_field(s.q_strides, visit, prefix + "q_strides.");
  for_each_field(s.k_strides, visit, prefix + "k_strides.");
  for_each_field(s.v_strides, visit, prefix + "v_strides.");
  for_each_field(s.o_strides, visit, prefix + "o_strides.");
  visit(prefix + "batch", s.batch);
  visit(prefix + "seqlen_q", s.seqlen_q);
  visit(prefix + "seqlen_k", s.seqlen_k);
  for_each_field(s.mask, visit, prefix + "mask.");
  for_each_field(s.block_mask, visit, prefix + "block_mask.");
  visit(prefix + "document_ids", s.document_ids);
  visit(prefix + "document_ids_batch_stride", s.document_ids_batch_stride);
  for_each_field(s.key_indices, visit, prefix + "key_indices.");
}

template <fields_detail::Is<VarlenParams> S, class Visit>
void for_each_field(S& s, Visit&& visit, const std::string& prefix = "") {
  for_each_field(static_cast<fields_detail::Base<AttentionSettings, S>&>(s), visit, prefix);
  visit(prefix + "q", s.q);
  visit(prefix + "k", s.k);
  visit(prefix + "v", s.v);
  visit(prefix + "o", s.o);
  visit(prefix + "lse", s.lse);
  visit(prefix + "q_row_stride", s.q_row_stride);
  visit(prefix + "q_head_stride", s.q_head_stride);
  visit(prefix + "k_row_stride", s.k_row_stride);
  visit(prefix + "k_head_stride", s.k_head_stride);
  visit(prefix + "v_row_stride", s.v_row_stride);
  visit(prefix + "v_head_stride", s.v_head_stride);
  visit(prefix + "o_row_stride", s.o_row_stride);
  visit(prefix + "o_head_stride", s.o_head_stride);
  visit(prefix + "batch", s.batch);
  visit(prefix + "total_q", s.total_q);
  visit(prefix + "total_k", s.total_k);
  visit(prefix + "cu_seqlens_q", s.cu_seqlens_q);
  visit(prefix + "cu_seqlens_k", s.cu_seqlens_k);
  visit(prefix + "max_seqlen_q", s.max_seqlen_q);
  visit(prefix + "max_seqlen_k", s.max_seqlen_k);
}

template <fields_detail::Is<MergeParams> S, class Visit>
void for_each_field(S& s, Visit&& visit, const std::string& prefix = "") {
  visit(prefix + "o_partials", s.o_partials);
  visit(prefix + "lse_partials", s.lse_partials);
  visit(prefix + "o", s.o);
  visit(prefix + "lse", s.lse);
  for_each_field(s.o_strides, visit, prefix + "o_strides.");
  visit(prefix + "num_partials", s.num_partials);
  visit(prefix + "batch", s.batch);
  visit(prefix + "seqlen", s.seqlen);
  visit(prefix + "heads", s.heads);
  visit(prefix + "head_dim_v", s.head_dim_v);
  visit(prefix + "dtype", s.dtype);
  visit(prefix + "sinks", s.sinks);
}

template <fields_detail::Is<DecodeParams> S, class Visit>
void for_each_field(S& s, Visit&& visit, const std::string& prefix = "") {
  for_each_field(static_cast<fields_detail::Base<HeadSettings, S>&>(s), visit, prefix);
  visit(prefix + "q", s.q);
  visit(prefix + "k_cache", s.k_cache);
  visit(prefix + "v_cache", s.v_cache);
  visit(prefix + "k_new", s.k_new);
  visit(prefix + "v_new", s.v_new);
  visit(prefix + "o", s.o);
  visit(prefix + "lse", s.lse);
  visit(prefix + "cache_seqlens", s.cache_seqlens);
  visit(prefix + "keys_after", s.keys_after);
  visit(prefix + "cu_seqlens_q", s.cu_seqlens_q);
  for_each_field(s.q_strides, visit, prefix + "q_strides.");
  for_each_field(s.cache_strides, visit, prefix + "cache_strides.");
  for_each_field(s.new_strides, visit, prefix + "new_strides.");
  for_each_field(s.o_strides, visit, prefix + "o_strides.");
  visit(prefix + "batch", s.batch);
  visit(prefix + "seqlen_q", s.seqlen_q);
  visit(prefix + "seqlen_new", s.seqlen_new);
  visit(prefix + "cache_dtype", s.cache_dtype);
  visit(prefix + "cache_element", s.cache_element);
  visit(prefix + "scale_granularity", s.scale_granularity);
  visit(prefix + "k_scale", s.k_scale);
  visit(prefix + "v_scale", s.v_scale);
  for_each_field(s.scale_strides, visit, prefix + "scale_strides.");
  visit(prefix + "scale_group_size", s.scale_group_size);
  visit(prefix + "quantize_query_int8", s.quantize_query_int8);
  visit(prefix + "quantize_probs_u8", s.quantize_probs_u8);
  visit(prefix + "cache_seqlen_max", s.cache_seqlen_max);
  visit(prefix + "block_table", s.block_table);
  visit(prefix + "block_table_stride", s.block_table_stride);
  visit(prefix + "max_pages", s.max_pages);
  visit(prefix + "num_pages", s.num_pages);
  visit(prefix + "page_size", s.page_size);
  visit(prefix + "rotary_cos", s.rotary_cos);
  visit(prefix + "rotary_sin", s.rotary_sin);
  visit(prefix + "rotary_dim", s.rotary_dim);
  visit(prefix + "rotary_max_pos", s.rotary_max_pos);
  visit(prefix + "rotary_interleaved", s.rotary_interleaved);
  visit(prefix + "rotary_queries_at_cache_end", s.rotary_queries_at_cache_end);
  visit(prefix + "num_splits", s.num_splits);
  for_each_field(s.key_indices, visit, prefix + "key_indices.");
  for_each_field(s.block_mask, visit, prefix + "block_mask.");
  visit(prefix + "document_ids", s.document_ids);
  visit(prefix + "document_ids_batch_stride", s.document_ids_batch_stride);
}

template <fields_detail::Is<QuantizeParams> S, class Visit>
void for_each_field(S& s, Visit&& visit, const std::string& prefix = "") {
  visit(prefix + "x", s.x);
  visit(prefix + "values", s.values);
  visit(prefix + "scales", s.scales);
  for_each_field(s.x_strides, visit, prefix + "x_strides.");
  for_each_field(s.value_strides, visit, prefix + "value_strides.");
  for_each_field(s.scale_strides, visit, prefix + "scale_strides.");
  visit(prefix + "outer", s.outer);
  visit(prefix + "seqlen", s.seqlen);
  visit(prefix + "heads", s.heads);
  visit(prefix + "head_dim", s.head_dim);
  visit(prefix + "dtype", s.dtype);
  visit(prefix + "element", s.element);
  visit(prefix + "granularity", s.granularity);
  visit(prefix + "group_size", s.group_size);
}

template <fields_detail::Is<IndexerParams> S, class Visit>
void for_each_field(S& s, Visit&& visit, const std::string& prefix = "") {
  visit(prefix + "q", s.q);
  visit(prefix + "k_cache", s.k_cache);
  visit(prefix + "k_scale", s.k_scale);
  visit(prefix + "weights", s.weights);
  visit(prefix + "key_indices", s.key_indices);
  visit(prefix + "scores", s.scores);
  visit(prefix + "cache_seqlens", s.cache_seqlens);
  for_each_field(s.q_strides, visit, prefix + "q_strides.");
  for_each_field(s.cache_strides, visit, prefix + "cache_strides.");
  for_each_field(s.scale_strides, visit, prefix + "scale_strides.");
  visit(prefix + "batch", s.batch);
  visit(prefix + "seqlen_q", s.seqlen_q);
  visit(prefix + "heads", s.heads);
  visit(prefix + "head_dim", s.head_dim);
  visit(prefix + "dtype", s.dtype);
  visit(prefix + "cache_dtype", s.cache_dtype);
  visit(prefix + "cache_element", s.cache_element);
  visit(prefix + "cache_seqlen_max", s.cache_seqlen_max);
  visit(prefix + "block_table", s.block_table);
  visit(prefix + "block_table_stride", s.block_table_stride);
  visit(prefix + "max_pages", s.max_pages);
  visit(prefix + "num_pages", s.num_pages);
  visit(prefix + "page_size", s.page_size);
  visit(prefix + "top_k", s.top_k);
  visit(prefix + "causal", s.causal);
  visit(prefix + "num_threads", s.num_threads);
}

template <fields_detail::Is<BackwardParams> S, class Visit>
void for_each_field(S& s, Visit&& visit, const std::string& prefix = "") {
  for_each_field(s.attention, visit, prefix + "attention.");
  visit(prefix + "d_o", s.d_o);
  visit(prefix + "dq", s.dq);
  visit(prefix + "dk", s.dk);
  visit(prefix + "dv", s.dv);
  for_each_field(s.do_strides, visit, prefix + "do_strides.");
  for_each_field(s.dq_strides, visit, prefix + "dq_strides.");
  for_each_field(s.dk_strides, visit, prefix + "dk_strides.");
  for_each_field(s.dv_strides, visit, prefix + "dv_strides.");
  visit(prefix + "dsinks", s.dsinks);
}

template <fields_detail::Is<VarlenBackwardParams> S, class Visit>
void for_each_field(S& s, Visit&& visit, const std::string& prefix = "") {
  for_each_field(s.forward, visit, prefix + "forward.");
  visit(prefix + "d_o", s.d_o);
  visit(prefix + "dq", s.dq);
  visit(prefix + "dk", s.dk);
  visit(prefix + "dv", s.dv);
  visit(prefix + "do_row_stride", s.do_row_stride);
  visit(prefix + "do_head_stride", s.do_head_stride);
  visit(prefix + "dq_row_stride", s.dq_row_stride);
  visit(prefix + "dq_head_stride", s.dq_head_stride);
  visit(prefix + "dk_row_stride", s.dk_row_stride);
  visit(prefix + "dk_head_stride", s.dk_head_stride);
  visit(prefix + "dv_row_stride", s.dv_row_stride);
  visit(prefix + "dv_head_stride", s.dv_head_stride);
  visit(prefix + "dsinks", s.dsinks);
}

}  // namespace flashattn

#endif  // FLASHATTN_FIELDS_H_
