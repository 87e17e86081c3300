// The C API's structs against the C++ API's: every field of every C struct, changed alone, reaches the C++
// field of the same name through the mapping the entry points use (src/c_api/convert.h), and nothing else;
// every C++ field is reached but the few a C struct leaves out on purpose; the *_init defaults are the C++
// member initializers; and each stride helper gives its C++ twin's strides for every kind of shape. The
// field lists on both sides are held complete: for_each_field (include/flashattn/fields.h) and this file's
// lists of the C fields must name every member of their structs.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "c_api/convert.h"
#include "flashattn/c_api.h"
#include "flashattn/fields.h"
#include "flashattn/flashattn.h"

namespace flashattn {
namespace {

// ---- A field's value as text, alike for its C and its C++ form -------------------------------------------

std::string Render(bool v) { return v ? "true" : "false"; }
template <std::integral T>
std::string Render(T v) {
  return std::to_string(v);
}
std::string Render(float v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", v);
  return text;
}
std::string Render(const void* p) {
  char text[32];
  std::snprintf(text, sizeof text, "pointer %p", p);
  return text;
}
std::string Render(DType d) { return "dtype " + std::string(to_string(d)); }
std::string Render(CacheElement e) { return "cache element " + std::string(to_string(e)); }
std::string Render(ScaleGranularity g) { return "granularity " + std::string(to_string(g)); }
std::string Render(MaskKind k) {
  const char* names[] = {"none", "bool", "additive"};
  return "mask " + std::string(names[static_cast<int>(k)]);
}
template <typename T>
std::string Render(const std::optional<T>& v) {
  return v ? Render(*v) : "unset";
}

// The C enums, named as the C++ ones are: a C value mapped to another C++ value shows.
std::string Render(flashattn_dtype d) {
  const char* names[] = {"f32", "f16", "bf16"};
  return "dtype " + std::string(names[d]);
}
std::string Render(flashattn_cache_element e) {
  const char* names[] = {"float", "int8", "fp8_e4m3", "fp8_e5m2"};
  return "cache element " + std::string(names[e]);
}
std::string Render(flashattn_scale_granularity g) {
  const char* names[] = {"per_token", "per_head", "per_tensor"};
  return "granularity " + std::string(names[g]);
}
std::string Render(flashattn_mask_kind k) {
  const char* names[] = {"none", "bool", "additive"};
  return "mask " + std::string(names[k]);
}

// Every field of a C++ struct, by for_each_field's name.
using Leaves = std::map<std::string, std::string>;

template <typename Params>
Leaves LeavesOf(const Params& params) {
  Leaves leaves;
  for_each_field(params, [&](const std::string& name, const auto& field) { leaves[name] = Render(field); });
  return leaves;
}

// ---- Another value of a C field ---------------------------------------------------------------------------

// A value unlike the default, different for each `seed` (the field's index).
template <std::integral T>
void Change(T& v, int seed) {
  v = static_cast<T>(1000 + seed);
}
void Change(bool& v, int) { v = !v; }
void Change(float& v, int seed) { v = 0.5f + static_cast<float>(seed); }
template <typename T>
void Change(T*& p, int seed) {
  p = reinterpret_cast<T*>(std::uintptr_t{0x10000} + 64 * static_cast<std::uintptr_t>(seed));
}
// The next valid value of an enum of `count` values.
template <typename Enum>
void Cycle(Enum& e, int count) {
  e = static_cast<Enum>((static_cast<int>(e) + 1) % count);
}
void Change(flashattn_dtype& e, int) { Cycle(e, 3); }
void Change(flashattn_cache_element& e, int) { Cycle(e, 4); }
void Change(flashattn_scale_granularity& e, int) { Cycle(e, 3); }
void Change(flashattn_mask_kind& e, int) { Cycle(e, 3); }

// One field of a C struct: its name (the C++ field's, but for the `score.` of the score settings), how to
// render it and change it, and the members it is made of (two for the scale and its has_scale flag).
struct CField {
  std::string name;
  std::function<std::string()> render;
  std::function<void(int)> change;
  std::vector<std::pair<std::size_t, std::size_t>> members;  // offset and size in the struct
};

// Collects the CFields of a C struct whose first byte is `base`.
class CFields {
 public:
  explicit CFields(const void* base) : base_(static_cast<const char*>(base)) {}

  template <typename T>
  void Field(const std::string& name, T& field) {
    fields_.push_back({name, [&field] { return Render(field); }, [&field](int seed) { Change(field, seed); },
                       {Member(field)}});
  }
  // score.has_scale and score.scale: one optional value.
  void Optional(const std::string& name, bool& has, float& value) {
    fields_.push_back({name, [&] { return has ? Render(value) : std::string("unset"); },
                       [&](int seed) { has = true, Change(value, seed); }, {Member(has), Member(value)}});
  }
  // head_dim_v: 0 means unset.
  void ZeroMeansUnset(const std::string& name, std::int64_t& value) {
    fields_.push_back({name, [&] { return value == 0 ? std::string("unset") : Render(value); },
                       [&](int seed) { Change(value, seed); }, {Member(value)}});
  }
  std::vector<CField>& fields() { return fields_; }

 private:
  template <typename T>
  std::pair<std::size_t, std::size_t> Member(const T& field) const {
    return {static_cast<std::size_t>(reinterpret_cast<const char*>(&field) - base_), sizeof(T)};
  }
  const char* base_;
  std::vector<CField> fields_;
};

// ---- The C structs' fields ----------------------------------------------------------------------------------

void VisitC(flashattn_strides& c, CFields& v, const std::string& prefix) {
  v.Field(prefix + "batch", c.batch), v.Field(prefix + "seq", c.seq), v.Field(prefix + "head", c.head);
}

void VisitC(flashattn_tiling& c, CFields& v, const std::string& prefix) {
  v.Field(prefix + "fast_memory_bytes", c.fast_memory_bytes);
  v.Field(prefix + "block_rows", c.block_rows), v.Field(prefix + "block_cols", c.block_cols);
}

void VisitC(flashattn_block_position& c, CFields& v, const std::string& prefix) {
  v.Field(prefix + "query_start", c.query_start), v.Field(prefix + "key_start", c.key_start);
  v.Field(prefix + "total_seqlen_q", c.total_seqlen_q), v.Field(prefix + "total_seqlen_k", c.total_seqlen_k);
}

void VisitC(flashattn_mask& c, CFields& v, const std::string& prefix) {
  v.Field(prefix + "kind", c.kind), v.Field(prefix + "data", c.data);
  v.Field(prefix + "stride_batch", c.stride_batch), v.Field(prefix + "stride_head", c.stride_head);
  v.Field(prefix + "stride_row", c.stride_row), v.Field(prefix + "stride_col", c.stride_col);
}

void VisitC(flashattn_block_mask& c, CFields& v, const std::string& prefix) {
  v.Field(prefix + "block_size_q", c.block_size_q), v.Field(prefix + "block_size_k", c.block_size_k);
  v.Field(prefix + "heads", c.heads);
  v.Field(prefix + "kv_num_blocks", c.kv_num_blocks), v.Field(prefix + "kv_indices", c.kv_indices);
  v.Field(prefix + "kv_width", c.kv_width);
  v.Field(prefix + "full_kv_num_blocks", c.full_kv_num_blocks);
  v.Field(prefix + "full_kv_indices", c.full_kv_indices), v.Field(prefix + "full_kv_width", c.full_kv_width);
}

void VisitC(flashattn_key_selection& c, CFields& v, const std::string& prefix) {
  v.Field(prefix + "indices", c.indices), v.Field(prefix + "count", c.count);
}

void VisitC(flashattn_score_settings& c, CFields& v, const std::string& prefix) {
  v.Optional(prefix + "scale", c.has_scale, c.scale);
  v.Field(prefix + "causal", c.causal);
  v.Field(prefix + "window_left", c.window_left), v.Field(prefix + "window_right", c.window_right);
  v.Field(prefix + "softcap", c.softcap);
  v.Field(prefix + "alibi_slopes", c.alibi_slopes), v.Field(prefix + "alibi_batch_stride", c.alibi_batch_stride);
  v.Field(prefix + "sinks", c.sinks);
}

void VisitC(flashattn_attention_params& c, CFields& v, const std::string& prefix) {
  v.Field(prefix + "q", c.q), v.Field(prefix + "k", c.k), v.Field(prefix + "v", c.v), v.Field(prefix + "o", c.o);
  v.Field(prefix + "lse", c.lse);
  VisitC(c.q_strides, v, prefix + "q_strides."), VisitC(c.k_strides, v, prefix + "k_strides.");
  VisitC(c.v_strides, v, prefix + "v_strides."), VisitC(c.o_strides, v, prefix + "o_strides.");
  v.Field(prefix + "batch", c.batch), v.Field(prefix + "seqlen_q", c.seqlen_q);
  v.Field(prefix + "seqlen_k", c.seqlen_k), v.Field(prefix + "heads_q", c.heads_q);
  v.Field(prefix + "heads_kv", c.heads_kv), v.Field(prefix + "head_dim", c.head_dim);
  v.ZeroMeansUnset(prefix + "head_dim_v", c.head_dim_v);
  v.Field(prefix + "dtype", c.dtype);
  VisitC(c.score, v, prefix + "score.");
  VisitC(c.mask, v, prefix + "mask.");
  VisitC(c.block_mask, v, prefix + "block_mask.");
  v.Field(prefix + "document_ids", c.document_ids);
  v.Field(prefix + "document_ids_batch_stride", c.document_ids_batch_stride);
  VisitC(c.key_indices, v, prefix + "key_indices.");
  v.Field(prefix + "dropout_p", c.dropout_p), v.Field(prefix + "dropout_seed", c.dropout_seed);
  v.Field(prefix + "dropout_offset", c.dropout_offset);
  VisitC(c.block_position, v, prefix + "block_position.");
  VisitC(c.tiling, v, prefix + "tiling.");
  v.Field(prefix + "num_threads", c.num_threads);
}

void VisitC(flashattn_varlen_params& c, CFields& v, const std::string& prefix) {
  v.Field(prefix + "q", c.q), v.Field(prefix + "k", c.k), v.Field(prefix + "v", c.v), v.Field(prefix + "o", c.o);
  v.Field(prefix + "lse", c.lse);
  v.Field(prefix + "q_row_stride", c.q_row_stride), v.Field(prefix + "q_head_stride", c.q_head_stride);
  v.Field(prefix + "k_row_stride", c.k_row_stride), v.Field(prefix + "k_head_stride", c.k_head_stride);
  v.Field(prefix + "v_row_stride", c.v_row_stride), v.Field(prefix + "v_head_stride", c.v_head_stride);
  v.Field(prefix + "o_row_stride", c.o_row_stride), v.Field(prefix + "o_head_stride", c.o_head_stride);
  v.Field(prefix + "batch", c.batch), v.Field(prefix + "total_q", c.total_q), v.Field(prefix + "total_k", c.total_k);
  v.Field(prefix + "cu_seqlens_q", c.cu_seqlens_q), v.Field(prefix + "cu_seqlens_k", c.cu_seqlens_k);
  v.Field(prefix + "max_seqlen_q", c.max_seqlen_q), v.Field(prefix + "max_seqlen_k", c.max_seqlen_k);
  v.Field(prefix + "heads_q", c.heads_q), v.Field(prefix + "heads_kv", c.heads_kv);
  v.Field(prefix + "head_dim", c.head_dim), v.ZeroMeansUnset(prefix + "head_dim_v", c.head_dim_v);
  v.Field(prefix + "dtype", c.dtype);
  VisitC(c.score, v, prefix + "score.");
  v.Field(prefix + "dropout_p", c.dropout_p), v.Field(prefix + "dropout_seed", c.dropout_seed);
  v.Field(prefix + "dropout_offset", c.dropout_offset);
  VisitC(c.tiling, v, prefix + "tiling.");
  v.Field(prefix + "num_threads", c.num_threads);
}

void VisitC(flashattn_merge_params& c, CFields& v, const std::string& prefix) {
  v.Field(prefix + "o_partials", c.o_partials), v.Field(prefix + "lse_partials", c.lse_partials);
  v.Field(prefix + "o", c.o), v.Field(prefix + "lse", c.lse);
  VisitC(c.o_strides, v, prefix + "o_strides.");
  v.Field(prefix + "num_partials", c.num_partials), v.Field(prefix + "batch", c.batch);
  v.Field(prefix + "seqlen", c.seqlen), v.Field(prefix + "heads", c.heads);
  v.Field(prefix + "head_dim_v", c.head_dim_v), v.Field(prefix + "dtype", c.dtype);
  v.Field(prefix + "sinks", c.sinks);
}

// The sizes, heads, element types, paged cache, rotary and splits of flashattn_decode_params.
void VisitDecodeSettings(flashattn_decode_params& c, CFields& v, const std::string& prefix) {
  v.Field(prefix + "batch", c.batch), v.Field(prefix + "seqlen_q", c.seqlen_q);
  v.Field(prefix + "seqlen_new", c.seqlen_new), v.Field(prefix + "heads_q", c.heads_q);
  v.Field(prefix + "heads_kv", c.heads_kv), v.Field(prefix + "head_dim", c.head_dim);
  v.ZeroMeansUnset(prefix + "head_dim_v", c.head_dim_v);
  v.Field(prefix + "dtype", c.dtype), v.Field(prefix + "cache_dtype", c.cache_dtype);
  v.Field(prefix + "cache_seqlen_max", c.cache_seqlen_max), v.Field(prefix + "block_table", c.block_table);
  v.Field(prefix + "block_table_stride", c.block_table_stride), v.Field(prefix + "max_pages", c.max_pages);
  v.Field(prefix + "num_pages", c.num_pages), v.Field(prefix + "page_size", c.page_size);
  v.Field(prefix + "rotary_cos", c.rotary_cos), v.Field(prefix + "rotary_sin", c.rotary_sin);
  v.Field(prefix + "rotary_dim", c.rotary_dim), v.Field(prefix + "rotary_max_pos", c.rotary_max_pos);
  v.Field(prefix + "rotary_interleaved", c.rotary_interleaved);
  v.Field(prefix + "rotary_queries_at_cache_end", c.rotary_queries_at_cache_end);
  VisitC(c.score, v, prefix + "score.");
  v.Field(prefix + "num_splits", c.num_splits), v.Field(prefix + "num_threads", c.num_threads);
  VisitC(c.key_indices, v, prefix + "key_indices.");
  VisitC(c.block_mask, v, prefix + "block_mask.");
  v.Field(prefix + "document_ids", c.document_ids);
  v.Field(prefix + "document_ids_batch_stride", c.document_ids_batch_stride);
}

void VisitC(flashattn_decode_params& c, CFields& v, const std::string& prefix) {
  v.Field(prefix + "q", c.q), v.Field(prefix + "k_cache", c.k_cache), v.Field(prefix + "v_cache", c.v_cache);
  v.Field(prefix + "k_new", c.k_new), v.Field(prefix + "v_new", c.v_new), v.Field(prefix + "o", c.o);
  v.Field(prefix + "lse", c.lse), v.Field(prefix + "cache_seqlens", c.cache_seqlens);
  v.Field(prefix + "keys_after", c.keys_after), v.Field(prefix + "cu_seqlens_q", c.cu_seqlens_q);
  VisitC(c.q_strides, v, prefix + "q_strides."), VisitC(c.cache_strides, v, prefix + "cache_strides.");
  VisitC(c.new_strides, v, prefix + "new_strides."), VisitC(c.o_strides, v, prefix + "o_strides.");
  VisitDecodeSettings(c, v, prefix);
  v.Field(prefix + "cache_element", c.cache_element), v.Field(prefix + "scale_granularity", c.scale_granularity);
  v.Field(prefix + "k_scale", c.k_scale), v.Field(prefix + "v_scale", c.v_scale);
  VisitC(c.scale_strides, v, prefix + "scale_strides.");
  v.Field(prefix + "scale_group_size", c.scale_group_size);
  v.Field(prefix + "quantize_query_int8", c.quantize_query_int8);
  v.Field(prefix + "quantize_probs_u8", c.quantize_probs_u8);
}

void VisitC(flashattn_quantize_params& c, CFields& v, const std::string& prefix) {
  v.Field(prefix + "x", c.x), v.Field(prefix + "values", c.values), v.Field(prefix + "scales", c.scales);
  VisitC(c.x_strides, v, prefix + "x_strides."), VisitC(c.value_strides, v, prefix + "value_strides.");
  VisitC(c.scale_strides, v, prefix + "scale_strides.");
  v.Field(prefix + "outer", c.outer), v.Field(prefix + "seqlen", c.seqlen), v.Field(prefix + "heads", c.heads);
  v.Field(prefix + "head_dim", c.head_dim), v.Field(prefix + "dtype", c.dtype);
  v.Field(prefix + "element", c.element), v.Field(prefix + "granularity", c.granularity);
  v.Field(prefix + "group_size", c.group_size);
}

void VisitC(flashattn_indexer_params& c, CFields& v, const std::string& prefix) {
  v.Field(prefix + "q", c.q), v.Field(prefix + "k_cache", c.k_cache), v.Field(prefix + "k_scale", c.k_scale);
  v.Field(prefix + "weights", c.weights), v.Field(prefix + "key_indices", c.key_indices);
  v.Field(prefix + "scores", c.scores), v.Field(prefix + "cache_seqlens", c.cache_seqlens);
  VisitC(c.q_strides, v, prefix + "q_strides."), VisitC(c.cache_strides, v, prefix + "cache_strides.");
  VisitC(c.scale_strides, v, prefix + "scale_strides.");
  v.Field(prefix + "batch", c.batch), v.Field(prefix + "seqlen_q", c.seqlen_q), v.Field(prefix + "heads", c.heads);
  v.Field(prefix + "head_dim", c.head_dim), v.Field(prefix + "dtype", c.dtype);
  v.Field(prefix + "cache_dtype", c.cache_dtype), v.Field(prefix + "cache_element", c.cache_element);
  v.Field(prefix + "cache_seqlen_max", c.cache_seqlen_max), v.Field(prefix + "block_table", c.block_table);
  v.Field(prefix + "block_table_stride", c.block_table_stride), v.Field(prefix + "max_pages", c.max_pages);
  v.Field(prefix + "num_pages", c.num_pages), v.Field(prefix + "page_size", c.page_size);
  v.Field(prefix + "top_k", c.top_k), v.Field(prefix + "causal", c.causal);
  v.Field(prefix + "num_threads", c.num_threads);
}

void VisitC(flashattn_backward_params& c, CFields& v, const std::string& prefix) {
  VisitC(c.attention, v, prefix + "attention.");
  v.Field(prefix + "d_o", c.d_o), v.Field(prefix + "dq", c.dq), v.Field(prefix + "dk", c.dk);
  v.Field(prefix + "dv", c.dv);
  VisitC(c.do_strides, v, prefix + "do_strides."), VisitC(c.dq_strides, v, prefix + "dq_strides.");
  VisitC(c.dk_strides, v, prefix + "dk_strides."), VisitC(c.dv_strides, v, prefix + "dv_strides.");
  v.Field(prefix + "dsinks", c.dsinks);
}

void VisitC(flashattn_varlen_backward_params& c, CFields& v, const std::string& prefix) {
  VisitC(c.forward, v, prefix + "forward.");
  v.Field(prefix + "d_o", c.d_o), v.Field(prefix + "dq", c.dq), v.Field(prefix + "dk", c.dk);
  v.Field(prefix + "dv", c.dv);
  v.Field(prefix + "do_row_stride", c.do_row_stride), v.Field(prefix + "do_head_stride", c.do_head_stride);
  v.Field(prefix + "dq_row_stride", c.dq_row_stride), v.Field(prefix + "dq_head_stride", c.dq_head_stride);
  v.Field(prefix + "dk_row_stride", c.dk_row_stride), v.Field(prefix + "dk_head_stride", c.dk_head_stride);
  v.Field(prefix + "dv_row_stride", c.dv_row_stride), v.Field(prefix + "dv_head_stride", c.dv_head_stride);
  v.Field(prefix + "dsinks", c.dsinks);
}

template <typename C>
std::vector<CField> FieldsOf(C& c) {
  CFields v(&c);
  VisitC(c, v, "");
  return std::move(v.fields());
}

// ---- Every member listed -------------------------------------------------------------------------------------

// Converts to anything: S{Any{}, ...} compiles for at most as many initializers as S has elements (its base
// class, then its members).
struct Any {
  template <typename T>
  operator T() const {
    return T{};
  }
};

template <typename S, std::size_t... I>
constexpr bool InitializableFrom(std::index_sequence<I...>) {
  return requires { S{(void(I), Any{})...}; };
}

template <typename S, std::size_t N = 0>
constexpr std::size_t ElementCount() {
  if constexpr (InitializableFrom<S>(std::make_index_sequence<N + 1>())) {
    return ElementCount<S, N + 1>();
  } else {
    return N;
  }
}

// The first part of each dotted name: the struct's own members.
std::set<std::string> Members(const std::vector<std::string>& names) {
  std::set<std::string> members;
  for (const std::string& name : names) members.insert(name.substr(0, name.find('.')));
  return members;
}

// Member bytes, in the order listed: each after the one before, inside the struct.
void ExpectInOrderWithin(const std::vector<std::pair<std::size_t, std::size_t>>& members, std::size_t bytes,
                         const std::string& what) {
  std::size_t end = 0;
  for (const auto& [offset, size] : members) {
    EXPECT_GE(offset, end) << what << ": a member listed out of order, or twice, at byte " << offset;
    end = offset + size;
  }
  EXPECT_LE(end, bytes) << what;
}

// This file's list of a C struct's fields names each of its members once, in order.
template <typename C>
void ExpectCFieldsComplete(const char* what) {
  C c{};
  std::vector<std::string> nested;  // fields of a member struct
  std::size_t listed = 0;           // the struct's own members, but member structs
  std::vector<std::pair<std::size_t, std::size_t>> members;
  for (const CField& field : FieldsOf(c)) {
    members.insert(members.end(), field.members.begin(), field.members.end());
    if (field.name.find('.') != std::string::npos) {
      nested.push_back(field.name);
    } else {
      listed += field.members.size();
    }
  }
  EXPECT_EQ(listed + Members(nested).size(), ElementCount<C>())
      << what << ": a member is missing from this file's list";
  ExpectInOrderWithin(members, sizeof(C), what);
}

// for_each_field names each member of S once, in order; `Base` is S's base class (void: none).
template <typename S, typename Base>
void ExpectCppFieldsComplete(const char* what) {
  const S s{};
  std::vector<std::string> names;
  std::vector<std::pair<std::size_t, std::size_t>> members;
  for_each_field(s, [&](const std::string& name, const auto& field) {
    names.push_back(name);
    members.emplace_back(reinterpret_cast<const char*>(&field) - reinterpret_cast<const char*>(&s), sizeof field);
  });
  std::set<std::string> own = Members(names);
  std::size_t elements = own.size();
  if constexpr (!std::is_void_v<Base>) {
    std::vector<std::string> inherited;
    const Base base{};
    for_each_field(base, [&](const std::string& name, const auto&) { inherited.push_back(name); });
    for (const std::string& member : Members(inherited)) own.erase(member);
    elements = own.size() + 1;
  }
  EXPECT_EQ(elements, ElementCount<S>()) << what << ": a member is missing from for_each_field";
  ExpectInOrderWithin(members, sizeof(S), what);
}

TEST(CApiFields, EveryMemberOfEveryStructIsListed) {
  ExpectCFieldsComplete<flashattn_strides>("flashattn_strides");
  ExpectCFieldsComplete<flashattn_tiling>("flashattn_tiling");
  ExpectCFieldsComplete<flashattn_block_position>("flashattn_block_position");
  ExpectCFieldsComplete<flashattn_mask>("flashattn_mask");
  ExpectCFieldsComplete<flashattn_block_mask>("flashattn_block_mask");
  ExpectCFieldsComplete<flashattn_key_selection>("flashattn_key_selection");
  ExpectCFieldsComplete<flashattn_score_settings>("flashattn_score_settings");
  ExpectCFieldsComplete<flashattn_attention_params>("flashattn_attention_params");
  ExpectCFieldsComplete<flashattn_varlen_params>("flashattn_varlen_params");
  ExpectCFieldsComplete<flashattn_merge_params>("flashattn_merge_params");
  ExpectCFieldsComplete<flashattn_decode_params>("flashattn_decode_params");
  ExpectCFieldsComplete<flashattn_quantize_params>("flashattn_quantize_params");
  ExpectCFieldsComplete<flashattn_indexer_params>("flashattn_indexer_params");
  ExpectCFieldsComplete<flashattn_backward_params>("flashattn_backward_params");
  ExpectCFieldsComplete<flashattn_varlen_backward_params>("flashattn_varlen_backward_params");
  ExpectCppFieldsComplete<Strides, void>("Strides");
  ExpectCppFieldsComplete<Tiling, void>("Tiling");
  ExpectCppFieldsComplete<BlockPosition, void>("BlockPosition");
  ExpectCppFieldsComplete<MaskTensor, void>("MaskTensor");
  ExpectCppFieldsComplete<BlockMask, void>("BlockMask");
  ExpectCppFieldsComplete<KeySelection, void>("KeySelection");
  ExpectCppFieldsComplete<ScoreSettings, void>("ScoreSettings");
  ExpectCppFieldsComplete<HeadSettings, ScoreSettings>("HeadSettings");
  ExpectCppFieldsComplete<AttentionSettings, HeadSettings>("AttentionSettings");
  ExpectCppFieldsComplete<AttentionParams, AttentionSettings>("AttentionParams");
  ExpectCppFieldsComplete<VarlenParams, AttentionSettings>("VarlenParams");
  ExpectCppFieldsComplete<MergeParams, void>("MergeParams");
  ExpectCppFieldsComplete<DecodeParams, HeadSettings>("DecodeParams");
  ExpectCppFieldsComplete<QuantizeParams, void>("QuantizeParams");
  ExpectCppFieldsComplete<IndexerParams, void>("IndexerParams");
  ExpectCppFieldsComplete<BackwardParams, void>("BackwardParams");
  ExpectCppFieldsComplete<VarlenBackwardParams, void>("VarlenBackwardParams");
}

// ---- Each C field reaches its C++ field ------------------------------------------------------------------------

// The C++ name of a C field: the score settings are a member `score` in C, inherited in C++.
std::string CppName(std::string name) {
  for (std::size_t at; (at = name.find("score.")) != std::string::npos;) name.erase(at, 6);
  return name;
}

// The C++ fields whose values differ.
std::set<std::string> Differing(const Leaves& a, const Leaves& b) {
  std::set<std::string> names;
  for (const auto& [name, value] : a)
    if (b.at(name) != value) names.insert(name);
  return names;
}

std::string Join(const std::set<std::string>& names) {
  std::string text;
  for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
  return "{" + text + "}";
}

// Changes each field of `defaults` alone and converts: exactly the C++ field of its name takes its value.
// Every C++ field is so reached but those of `left_out`, which the C struct does not have.
template <typename C>
void ExpectEachFieldReachesItsCppField(const C& defaults, const std::set<std::string>& left_out) {
  const Leaves unchanged = LeavesOf(c_api::ToCpp(defaults));
  std::set<std::string> reached;
  C probe = defaults;
  const std::size_t count = FieldsOf(probe).size();
  for (std::size_t i = 0; i < count; ++i) {
    C changed = defaults;
    CField field = FieldsOf(changed)[i];
    field.change(static_cast<int>(i));
    const std::string name = CppName(field.name);
    ASSERT_TRUE(unchanged.count(name)) << "C field " << field.name << " has no C++ field " << name;
    const Leaves converted = LeavesOf(c_api::ToCpp(changed));
    EXPECT_EQ(Join(Differing(converted, unchanged)), Join({name})) << "C field " << field.name << " set alone";
    EXPECT_EQ(converted.at(name), field.render()) << "C field " << field.name;
    reached.insert(name);
  }
  for (const auto& [name, value] : unchanged) {
    EXPECT_TRUE(reached.count(name) || left_out.count(name)) << "C++ field " << name << " has no C field";
  }
}

TEST(CApiFields, EachFieldReachesItsCppField) {
  ExpectEachFieldReachesItsCppField(c_api::DefaultAttention(), {});
  // A varlen call's sequences are each their own problem: block_position keeps its default.
  ExpectEachFieldReachesItsCppField(
      c_api::DefaultVarlen(), {"block_position.query_start", "block_position.key_start",
                               "block_position.total_seqlen_q", "block_position.total_seqlen_k"});
  ExpectEachFieldReachesItsCppField(c_api::DefaultMerge(), {});
  ExpectEachFieldReachesItsCppField(c_api::DefaultDecode(), {});
  ExpectEachFieldReachesItsCppField(c_api::DefaultQuantize(), {});
  ExpectEachFieldReachesItsCppField(c_api::DefaultIndexer(), {});
  ExpectEachFieldReachesItsCppField(c_api::DefaultBackward(), {});
  ExpectEachFieldReachesItsCppField(c_api::DefaultVarlenBackward(),
                                    {"forward.block_position.query_start", "forward.block_position.key_start",
                                     "forward.block_position.total_seqlen_q",
                                     "forward.block_position.total_seqlen_k"});
}

// ---- The defaults ------------------------------------------------------------------------------------------------

// Fills a C struct with garbage, then with its *_init function.
template <typename C>
C Initialized(void (*init)(C*)) {
  C c;
  std::memset(&c, 0x5a, sizeof c);
  init(&c);
  return c;
}

TEST(CApiFields, InitGivesTheCppDefaults) {
  EXPECT_EQ(LeavesOf(c_api::ToCpp(Initialized(flashattn_attention_params_init))), LeavesOf(AttentionParams()));
  EXPECT_EQ(LeavesOf(c_api::ToCpp(Initialized(flashattn_varlen_params_init))), LeavesOf(VarlenParams()));
  EXPECT_EQ(LeavesOf(c_api::ToCpp(Initialized(flashattn_merge_params_init))), LeavesOf(MergeParams()));
  EXPECT_EQ(LeavesOf(c_api::ToCpp(Initialized(flashattn_decode_params_init))), LeavesOf(DecodeParams()));
  EXPECT_EQ(LeavesOf(c_api::ToCpp(Initialized(flashattn_quantize_params_init))), LeavesOf(QuantizeParams()));
  EXPECT_EQ(LeavesOf(c_api::ToCpp(Initialized(flashattn_indexer_params_init))), LeavesOf(IndexerParams()));
  EXPECT_EQ(LeavesOf(c_api::ToCpp(Initialized(flashattn_backward_params_init))), LeavesOf(BackwardParams()));
  EXPECT_EQ(LeavesOf(c_api::ToCpp(Initialized(flashattn_varlen_backward_params_init))),
            LeavesOf(VarlenBackwardParams()));
}

// ---- The stride helpers ----------------------------------------------------------------------------------------

// The C helper's result, read back through the mapping, equals the C++ helper's on the same struct.
template <typename C, typename SetC, typename SetCpp>
void ExpectStridesOfTwin(C c, const SetC& set_c, const SetCpp& set_cpp) {
  auto twin = c_api::ToCpp(c);
  set_cpp(twin);
  set_c(&c);
  EXPECT_EQ(Join(Differing(LeavesOf(c_api::ToCpp(c)), LeavesOf(twin))), "{}") << "the fields unlike the C++ helper's";
}

void ExpectStrides(const flashattn_strides& s, std::int64_t batch, std::int64_t seq, std::int64_t head,
                   const char* what) {
  EXPECT_EQ(s.batch, batch) << what;
  EXPECT_EQ(s.seq, seq) << what;
  EXPECT_EQ(s.head, head) << what;
}

// Decode with Nq = 3, Nnew = 2, Hq = 4, Hkv = 2, d = 24 and dv = `dv`; a cache of 40 rows, or pages of 16.
flashattn_decode_params DecodeShape(std::int64_t dv, bool values_in_keys, bool paged, std::int64_t group_size) {
  static float cache[1], scale[1];
  static const std::int32_t table[1] = {};
  flashattn_decode_params c = c_api::DefaultDecode();
  c.batch = 2, c.seqlen_q = 3, c.seqlen_new = 2, c.heads_q = 4, c.heads_kv = 2, c.head_dim = 24, c.head_dim_v = dv;
  c.k_cache = cache, c.v_cache = values_in_keys ? cache : cache + 1;
  c.cache_seqlen_max = 40;
  if (paged) c.block_table = table, c.page_size = 16, c.num_pages = 5, c.max_pages = 3;
  if (group_size > 0) {
    c.cache_element = FLASHATTN_CACHE_INT8, c.k_scale = scale, c.scale_group_size = group_size;
  }
  return c;
}

TEST(CApiFields, DecodeStrideHelperIsItsCppTwin) {
  struct Kind {
    const char* what;
    std::int64_t dv;
    bool values_in_keys, paged;
    std::int64_t group_size;
  };
  const Kind kinds[] = {{"dv = d", 0, false, false, 0},
                        {"dv < d, V inside K", 16, true, false, 0},
                        {"dv > d, V of its own", 40, false, false, 0},
                        {"paged", 0, false, true, 0},
                        {"paged, dv < d, V inside K", 16, true, true, 0},
                        {"scale groups", 0, false, false, 8},
                        {"paged scale groups, V inside K", 16, true, true, 8}};
  for (const Kind& kind : kinds) {
    SCOPED_TRACE(kind.what);
    const flashattn_decode_params c = DecodeShape(kind.dv, kind.values_in_keys, kind.paged, kind.group_size);
    ExpectStridesOfTwin(c, flashattn_decode_params_set_contiguous_strides,
                        [](DecodeParams& p) { p.set_contiguous_strides(); });
    flashattn_decode_params set = c;
    flashattn_decode_params_set_contiguous_strides(&set);
    const std::int64_t dv = kind.dv > 0 ? kind.dv : 24, rows = kind.paged ? 16 : 40;
    const std::int64_t groups = kind.group_size > 0 ? 24 / kind.group_size : 1;
    ExpectStrides(set.o_strides, 3 * 4 * dv, 4 * dv, dv, "o_strides: (batch, Nq, Hq, dv)");
    ExpectStrides(set.q_strides, 3 * 4 * 24, 4 * 24, 24, "q_strides: (batch, Nq, Hq, d)");
    ExpectStrides(set.new_strides, 2 * 2 * 24, 2 * 24, 24, "new_strides: (batch, Nnew, Hkv, d)");
    ExpectStrides(set.cache_strides, rows * 2 * 24, 2 * 24, 24, "cache_strides: (batch or page, rows, Hkv, d)");
    ExpectStrides(set.scale_strides, rows * 2 * groups, 2 * groups, groups, "scale_strides");
  }
}

TEST(CApiFields, AttentionStrideHelpersAreTheirCppTwins) {
  for (const std::int64_t dv : {0, 16, 40}) {
    SCOPED_TRACE("head_dim_v " + std::to_string(dv));
    flashattn_attention_params a = c_api::DefaultAttention();
    a.batch = 2, a.seqlen_q = 5, a.seqlen_k = 7, a.heads_q = 4, a.heads_kv = 2, a.head_dim = 24, a.head_dim_v = dv;
    ExpectStridesOfTwin(a, flashattn_attention_params_set_contiguous_strides,
                        [](AttentionParams& p) { p.set_contiguous_strides(); });
    ExpectStridesOfTwin(a, flashattn_attention_params_set_head_major_strides,
                        [](AttentionParams& p) { p.set_head_major_strides(); });
    flashattn_backward_params b = c_api::DefaultBackward();
    b.attention = a;
    ExpectStridesOfTwin(b, flashattn_backward_params_set_contiguous_strides,
                        [](BackwardParams& p) { p.set_contiguous_strides(); });
    ExpectStridesOfTwin(b, flashattn_backward_params_set_head_major_strides,
                        [](BackwardParams& p) { p.set_head_major_strides(); });
    flashattn_attention_params_set_contiguous_strides(&a);
    const std::int64_t v = dv > 0 ? dv : 24;
    ExpectStrides(a.o_strides, 5 * 4 * v, 4 * v, v, "o_strides: (batch, Nq, Hq, dv)");
    ExpectStrides(a.v_strides, 7 * 2 * v, 2 * v, v, "v_strides: (batch, Nk, Hkv, dv)");
  }
}

TEST(CApiFields, MergeQuantizeAndIndexerStrideHelpersAreTheirCppTwins) {
  flashattn_merge_params m = c_api::DefaultMerge();
  m.num_partials = 3, m.batch = 2, m.seqlen = 5, m.heads = 4, m.head_dim_v = 12;
  ExpectStridesOfTwin(m, flashattn_merge_params_set_contiguous_strides,
                      [](MergeParams& p) { p.set_contiguous_strides(); });
  for (const std::int64_t group_size : {0, 8}) {
    flashattn_quantize_params q = c_api::DefaultQuantize();
    q.outer = 2, q.seqlen = 5, q.heads = 3, q.head_dim = 24, q.group_size = group_size;
    ExpectStridesOfTwin(q, flashattn_quantize_params_set_contiguous_strides,
                        [](QuantizeParams& p) { p.set_contiguous_strides(); });
  }
  for (const std::int64_t page_size : {0, 16}) {
    flashattn_indexer_params x = c_api::DefaultIndexer();
    x.batch = 2, x.seqlen_q = 3, x.heads = 4, x.head_dim = 40, x.cache_seqlen_max = 50, x.page_size = page_size;
    const std::int32_t table[2] = {0, 1};
    if (page_size > 0) x.block_table = table;
    ExpectStridesOfTwin(x, flashattn_indexer_params_set_contiguous_strides,
                        [](IndexerParams& p) { p.set_contiguous_strides(); });
  }
}

// A struct the mapping rejects keeps its strides, and the last error names the field.
TEST(CApiFields, StrideHelperOfAnUnknownEnumValueSetsNothing) {
  flashattn_decode_params c = DecodeShape(16, true, false, 0);
  const int unknown = 7;  // as a C caller may store it: C++ may not hold it in the enum type
  std::memcpy(&c.cache_dtype, &unknown, sizeof unknown);
  c.o_strides = {1, 2, 3};
  flashattn_decode_params_set_contiguous_strides(&c);
  ExpectStrides(c.o_strides, 1, 2, 3, "o_strides");
  EXPECT_NE(std::string(flashattn_last_error()).find("cache_dtype"), std::string::npos) << flashattn_last_error();
  flashattn_decode_params_set_contiguous_strides(nullptr);  // ignored
}

}  // namespace
}  // namespace flashattn
