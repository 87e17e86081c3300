// decode's parameters: the HeadSettings as every attention call's, then the cache (its element type and
// scales, V inside K, the integer options, its capacity), the packed query rows' cu_seqlens_q, the tensors, and last the index tensors
// (cache_seqlens, keys_after, the block table) and the selected keys, which are read only once they are known to
// be readable.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/cache_element_traits.h"
#include "common/quantize.h"
#include "common/score.h"
#include "flashattn/decode.h"
#include "validate_checks.h"

namespace flashattn {

using namespace validation;

namespace {

// V read inside the K rows (v_cache == k_cache): dv ≤ d, no v_new, no scales of V's own.
void CheckValuesInKeys(const DecodeParams& p) {
  const std::int64_t dv = p.value_head_dim();
  if (dv > p.head_dim) {
    Fail("head_dim_v=", dv, " exceeds head_dim=", p.head_dim,
         ": V read inside the K cache (v_cache == k_cache) is the first head_dim_v features of each K row");
  }
  if (p.seqlen_new > 0 && p.v_new != nullptr) {
    Fail("v_new must be null when V is read inside the K cache (v_cache == k_cache): an append writes k_new's "
         "row once");
  }
  if (Quantized(p.cache_element) && p.v_scale != nullptr && p.v_scale != p.k_scale) {
    Fail("v_scale must be null or k_scale when V is read inside the K cache (v_cache == k_cache): V's values "
         "are K's, scaled by k_scale");
  }
}

// The integer options need a cache whose codes multiply as integers; P̃V's also one scale per row.
void CheckIntegerOptions(const DecodeParams& p) {
  const bool integer_dots =
      VisitCacheElement(p.cache_element, [](auto traits) { return decltype(traits)::kIntegerDots; });
  if (p.quantize_query_int8 && !integer_dots) {
    Fail("quantize_query_int8 needs an int8 cache (cache_element=int8), got cache_element=",
         to_string(p.cache_element));
  }
  if (p.quantize_probs_u8 && !integer_dots) {
    Fail("quantize_probs_u8 needs an int8 cache (cache_element=int8), got cache_element=",
         to_string(p.cache_element));
  }
  if (p.quantize_probs_u8 && ScaleGroupSize(p.scale_group_size, p.head_dim) != p.head_dim) {
    Fail("quantize_probs_u8 needs one V scale per row (scale_group_size 0), got scale_group_size=",
         p.scale_group_size);
  }
}

// The cache's element type and scales and what depends on them. Returns the scale groups per row.
std::int64_t CheckCacheSettings(const DecodeParams& p) {
  CheckQuantization("cache_element", p.cache_element, "scale_granularity", p.scale_granularity);
  const bool quantized = Quantized(p.cache_element);
  if (!quantized) {
    CheckDType("cache_dtype", p.cache_dtype);
    if (p.k_scale != nullptr || p.v_scale != nullptr) {
      Fail("k_scale and v_scale must be null for a float cache (cache_element=float)");
    }
  }
  if (p.values_in_keys()) CheckValuesInKeys(p);
  const std::int64_t dv = p.value_head_dim();
  if (quantized && !p.values_in_keys() && dv != p.head_dim) {
    Fail("head_dim_v=", dv, " must equal head_dim=", p.head_dim, " with a quantized cache (cache_element=",
         to_string(p.cache_element), ") whose V has a v_cache of its own");
  }
  const std::int64_t scale_groups =
      quantized ? CheckGroupSize("scale_group_size", p.scale_group_size, p.scale_granularity, p.head_dim) : 1;
  if (scale_groups > 1 && dv % p.scale_group_size != 0) {
    Fail("scale_group_size=", p.scale_group_size, " must divide head_dim_v=", dv,
         " too: V read inside the K cache (v_cache == k_cache) takes the first groups of each K row's scales");
  }
  CheckIntegerOptions(p);
  return scale_groups;
}

// A decode call's tensors: those it reads, those it writes (the caches and per-token scales too when keys
// are appended), and the fixed scales (per head or tensor), read and checked for use by an append.
struct DecodeTensors {
  std::vector<TensorView> inputs, outputs, fixed_scales;
};

// q, o, k_new or v_new: (batch, seqlen, heads, width), or packed (total_q, heads, width), its batch stride
// ignored.
TensorView RowTensor(const DecodeParams& p, const char* name, const void* data, const Strides& s,
                     std::int64_t seqlen, std::int64_t heads, std::int64_t width) {
  if (!p.packed()) return BatchTensor(name, data, p.dtype, s, p.batch, seqlen, heads, width);
  return BatchTensor(name, data, p.dtype, Strides{0, s.seq, s.head}, 1, p.total_query_rows(), heads, width);
}

// Packed queries: cu_seqlens_q readable, from 0, non-decreasing, no sequence longer than seqlen_q (its
// max_seqlen_q), and an append of every sequence's own rows or of none.
void CheckPackedRows(const DecodeParams& p) {
  CheckRange("batch", p.batch, 0, INT64_MAX - 1);  // cu_seqlens_q holds batch + 1 entries
  if (p.seqlen_new != 0 && p.seqlen_new != p.seqlen_q) {
    Fail("seqlen_new must be 0 or seqlen_q=", p.seqlen_q, " with packed queries (cu_seqlens_q set): each sequence "
         "appends its own query rows or none does, got seqlen_new=", p.seqlen_new);
  }
  CheckOutputs({}, {TensorView{"cu_seqlens_q", p.cu_seqlens_q, 4, {{"batch+1", p.batch + 1, 1}}}});
  const std::int32_t* cu = p.cu_seqlens_q;
  if (cu[0] != 0) Fail("cu_seqlens_q[0] must be 0, got ", cu[0]);
  for (std::int64_t b = 0; b < p.batch; ++b) {
    if (cu[b + 1] < cu[b]) {
      Fail("cu_seqlens_q must be non-decreasing, got cu_seqlens_q[", b, "]=", cu[b], " > cu_seqlens_q[", b + 1,
           "]=", cu[b + 1]);
    }
    if (cu[b + 1] - cu[b] > p.seqlen_q) {
      Fail("sequence ", b, " has ", cu[b + 1] - cu[b], " query rows in cu_seqlens_q (cu_seqlens_q[", b, "]=", cu[b],
           ", cu_seqlens_q[", b + 1, "]=", cu[b + 1], "), beyond seqlen_q=", p.seqlen_q, " (max_seqlen_q)");
    }
  }
}

constexpr BlockMaskNames kDecodeBlockMaskNames{"block_mask.kv_num_blocks", "block_mask.kv_indices",
                                               "block_mask.full_kv_num_blocks", "block_mask.full_kv_indices"};

// q, cache_seqlens, cu_seqlens_q, keys_after, k_new and v_new, the block table, the rotary tables, the slopes,
// sinks and the sparsity inputs.
std::vector<TensorView> DecodeInputs(const DecodeParams& p) {
  const auto view = [&](const char* name, const void* data, const Strides& s, std::int64_t seqlen,
                        std::int64_t heads, std::int64_t width) {
    return RowTensor(p, name, data, s, seqlen, heads, width);
  };
  std::vector<TensorView> inputs = {view("q", p.q, p.q_strides, p.seqlen_q, p.heads_q, p.head_dim),
                                    TensorView{"cache_seqlens", p.cache_seqlens, 4, {{"batch", p.batch, 1}}}};
  if (p.packed()) {
    inputs.push_back(TensorView{"cu_seqlens_q", p.cu_seqlens_q, 4, {{"batch+1", p.batch + 1, 1}}});
  }
  if (p.keys_after != nullptr) inputs.push_back(TensorView{"keys_after", p.keys_after, 4, {{"batch", p.batch, 1}}});
  if (p.seqlen_new > 0) {
    inputs.push_back(view("k_new", p.k_new, p.new_strides, p.seqlen_new, p.heads_kv, p.head_dim));
    if (!p.values_in_keys()) {
      inputs.push_back(view("v_new", p.v_new, p.new_strides, p.seqlen_new, p.heads_kv, p.value_head_dim()));
    }
  }
  if (p.paged()) inputs.push_back(BlockTableView(CacheLayout::Of(p)));
  if (p.rotary_dim > 0) {
    CheckSize("rotary_max_pos", p.rotary_max_pos, 0);
    for (const auto& [name, table] :
         {std::pair{"rotary_cos", p.rotary_cos}, std::pair{"rotary_sin", p.rotary_sin}}) {
      inputs.push_back(TensorView{
          name, table, 4, {{"pos", p.rotary_max_pos, p.rotary_dim / 2}, {"dim", p.rotary_dim / 2, 1}}});
      if (p.rotary_max_pos > 0 && table == nullptr) Fail(name, " is a null pointer but rotary_dim=", p.rotary_dim);
    }
  }
  if (p.alibi_slopes != nullptr) {
    inputs.push_back(AlibiView("alibi_slopes", p.alibi_slopes, p.alibi_batch_stride, p.batch, p.heads_q));
  }
  if (p.sinks != nullptr) inputs.push_back(SinksView("sinks", p.sinks, p.heads_q));
  if (p.key_indices.active()) {
    inputs.push_back(KeySelectionView(p.key_indices, p.packed() ? p.total_query_rows() : p.batch * p.seqlen_q,
                                      p.heads_kv));
  }
  AddBlockMaskTensors(p.block_mask, kDecodeBlockMaskNames, p.batch, p.seqlen_q, &inputs);
  if (p.document_ids != nullptr) {
    const std::int64_t capacity = CheckCapacity(CacheLayout::Of(p));
    const std::int64_t stride = p.document_ids_batch_stride == 0 ? capacity : p.document_ids_batch_stride;
    inputs.push_back(
        TensorView{"document_ids", p.document_ids, 4, {{"batch", p.batch, stride}, {"position", capacity, 1}}});
  }
  return inputs;
}

// The inputs, the caches and their scales, o and lse. V inside the K cache is part of k_cache's rows (dv ≤ d,
// the same strides): checked, and written, as k_cache.
DecodeTensors DecodeTensorsOf(const DecodeParams& p, std::int64_t scale_groups) {
  DecodeTensors t{DecodeInputs(p), {}, {}};
  const std::int64_t cache_outer = p.paged() ? p.num_pages : p.batch;
  const std::int64_t cache_seq = p.paged() ? p.page_size : p.cache_seqlen_max;
  const std::int64_t cache_bytes = CacheElementBytes(p);
  std::vector<TensorView> caches = {
      BatchTensor("k_cache", p.k_cache, cache_bytes, p.cache_strides, cache_outer, cache_seq, p.heads_kv, p.head_dim)};
  if (!p.values_in_keys()) {
    caches.push_back(BatchTensor("v_cache", p.v_cache, cache_bytes, p.cache_strides, cache_outer, cache_seq,
                                 p.heads_kv, p.value_head_dim()));
  }
  if (Quantized(p.cache_element)) {
    std::vector<std::pair<const char*, const float*>> scale_tensors = {{"k_scale", p.k_scale}};
    if (!p.values_in_keys()) scale_tensors.emplace_back("v_scale", p.v_scale);  // inside K, V's are k_scale
    for (const auto& [name, scales] : scale_tensors) {
      const TensorView view = ScaleView(name, scales, p.scale_granularity, p.scale_strides, cache_outer, cache_seq,
                                        p.heads_kv, scale_groups);
      (p.scale_granularity == ScaleGranularity::kPerToken ? caches : t.fixed_scales).push_back(view);
    }
  }
  t.outputs = {RowTensor(p, "o", p.o, p.o_strides, p.seqlen_q, p.heads_q, p.value_head_dim())};
  if (p.lse != nullptr) {
    t.outputs.push_back(p.packed() ? LseView("lse", p.lse, 1, p.heads_q, p.total_query_rows())
                                   : LseView("lse", p.lse, p.batch, p.heads_q, p.seqlen_q));
  }
  // The caches (and per-token scales) are written when keys are appended; then they must not overlap
  // anything else either.
  std::vector<TensorView>& written_or_read = p.seqlen_new > 0 ? t.outputs : t.inputs;
  written_or_read.insert(written_or_read.end(), caches.begin(), caches.end());
  return t;
}

// The tensors, then the values an append quantizes and the fixed scales it quantizes them with.
void CheckDecodeTensors(const DecodeParams& p, std::int64_t scale_groups) {
  DecodeTensors t = DecodeTensorsOf(p, scale_groups);
  t.inputs.insert(t.inputs.end(), t.fixed_scales.begin(), t.fixed_scales.end());
  CheckOutputs(t.outputs, t.inputs);
  CheckSinkValues("sinks", p.sinks, p.heads_q);
  if (!Quantized(p.cache_element) || p.seqlen_new == 0) return;
  const TensorView k_new = RowTensor(p, "k_new", p.k_new, p.new_strides, p.seqlen_new, p.heads_kv, p.head_dim);
  const auto check_finite = [&](const TensorView& x, std::int64_t width) {
    CheckFinite(x.name, x.data, p.dtype, Strides{x.dims[0].stride, x.dims[1].stride, x.dims[2].stride},
                x.dims[0].size, x.dims[1].size, x.dims[2].size, width);
  };
  check_finite(k_new, p.head_dim);
  if (!p.values_in_keys()) {
    check_finite(RowTensor(p, "v_new", p.v_new, p.new_strides, p.seqlen_new, p.heads_kv, p.value_head_dim()),
                 p.value_head_dim());
  }
  for (const TensorView& scales : t.fixed_scales) CheckFixedScales(scales);
}

// Sequence b's lengths against the capacity and the rotary tables; returns its key count Nk.
std::int64_t CheckSequence(const DecodeParams& p, std::int64_t b, std::int64_t capacity) {
  const std::int64_t cached = p.cache_seqlens[b];
  if (cached < 0) Fail("cache_seqlens[", b, "] must be >= 0, got ", cached);
  if (p.keys_after != nullptr && p.keys_after[b] < 0) Fail("keys_after[", b, "] must be >= 0, got ", p.keys_after[b]);
  std::int64_t Nk;
  const std::int64_t appended = p.new_rows(b);
  const bool fits = MulAdd(1, cached, appended, &Nk);
  if (!fits || Nk > capacity) {
    Fail("cache_seqlens[", b, "] + ", p.packed() ? "its appended query rows" : "seqlen_new", " = ", cached, " + ",
         appended, " = ",
         fits ? std::to_string(Nk) : std::string("more than int64 holds"), " exceeds the cache capacity of ",
         capacity, " keys", p.paged() ? " (max_pages·page_size)" : " (cache_seqlen_max)");
  }
  if (p.rotary_dim > 0) {
    // The queries' last position: cache_seqlens[b] + seqlen_q − 1, or cache_seqlens[b] for them all.
    const std::int64_t rows = p.query_rows(b);
    const std::int64_t query_rows = p.rotary_queries_at_cache_end ? std::min<std::int64_t>(rows, 1) : rows;
    const std::int64_t last_pos = cached + std::max(appended, query_rows) - 1;
    if (last_pos >= p.rotary_max_pos) {
      Fail("rotary position ", last_pos, " of sequence ", b, " (cache_seqlens[", b, "]=", cached,
           ") is beyond the rotary tables' rotary_max_pos=", p.rotary_max_pos);
    }
  }
  return Nk;
}

// The pages sequence b reads or writes, each in range; adds page·page_size + slot of its appended keys.
void CheckPages(const DecodeParams& p, std::int64_t b, std::int64_t Nk, std::vector<std::int64_t>* appended_slots) {
  CheckPages(CacheLayout::Of(p), b, Nk);
  const std::int32_t* pages = p.block_table + b * p.block_table_stride;
  for (std::int64_t j = p.cache_seqlens[b]; j < Nk; ++j) {
    appended_slots->push_back(pages[j / p.page_size] * p.page_size + j % p.page_size);
  }
}

// The index tensors, now that they may be read: lengths, capacity, rotary positions, table entries, and no
// two appended keys in one slot.
void CheckIndexTensors(const DecodeParams& p, std::int64_t capacity) {
  std::vector<std::int64_t> appended_slots;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t Nk = CheckSequence(p, b, capacity);
    if (p.paged()) CheckPages(p, b, Nk, &appended_slots);
  }
  std::sort(appended_slots.begin(), appended_slots.end());
  const auto twice = std::adjacent_find(appended_slots.begin(), appended_slots.end());
  if (twice != appended_slots.end()) {
    Fail("two appended keys would be written to the same cache slot (page ", *twice / p.page_size, ", slot ",
         *twice % p.page_size, "): block_table pages overlap where sequences append");
  }
}

// The list length against the pointer, and the size of the lists.
void CheckSelectionSettings(const DecodeParams& p) {
  KeySelectionView(p.key_indices, 0, 0);
  if (!p.key_indices.active()) return;
  if (!p.packed() && p.seqlen_q > 0 && p.batch > INT64_MAX / p.seqlen_q) {
    Fail("key_indices is too large to index in 64 bits (batch=", p.batch, " seqlen_q=", p.seqlen_q, ")");
  }
}

// The block mask's and the document ids' settings: what they combine with, and document_ids' row stride.
void CheckSparsitySettings(const DecodeParams& p, std::int64_t capacity) {
  CheckBlockMaskSettings(p.block_mask, p.heads_q);
  if (!p.block_mask.active() && p.document_ids == nullptr) return;
  const char* block_mask = p.block_mask.active() ? "set" : "null";
  const char* document_ids = p.document_ids != nullptr ? "set" : "null";
  if (p.packed()) {
    Fail("a block mask or document_ids do not combine with packed queries (cu_seqlens_q set): pass each sequence's "
         "rows as (batch, seqlen_q) (block_mask.kv_num_blocks ", block_mask, ", document_ids ", document_ids, ")");
  }
  if (p.key_indices.active()) {
    Fail("key_indices does not combine with a block mask or document_ids: the selected keys are the row's keys "
         "already (block_mask.kv_num_blocks ", block_mask, ", document_ids ", document_ids, ")");
  }
  if (p.document_ids != nullptr && p.document_ids_batch_stride != 0 && p.document_ids_batch_stride < capacity) {
    Fail("document_ids_batch_stride must be 0 (contiguous) or >= the cache capacity ", capacity, ", got ",
         p.document_ids_batch_stride);
  }
}

// The lists, once the index tensors are checked: key blocks of each sequence's keys after the append; with
// document ids, every query row at a position of its sequence (Nq_b <= Nk_b).
void CheckSparsityValues(const DecodeParams& p) {
  if (!p.block_mask.active() && p.document_ids == nullptr) return;
  std::vector<std::int64_t> Nk(static_cast<std::size_t>(p.batch));
  for (std::int64_t b = 0; b < p.batch; ++b) Nk[b] = p.cache_seqlens[b] + p.new_rows(b);
  CheckBlockMaskLists(p.block_mask, kDecodeBlockMaskNames, p.seqlen_q, Nk, "cache_seqlens[b] + the keys it appends");
  if (p.document_ids == nullptr) return;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    if (p.query_rows(b) > Nk[b]) {
      Fail("document_ids need seqlen_q <= the keys of each sequence (query row i sits at position i + Nk - seqlen_q)"
           ", got seqlen_q=", p.query_rows(b), " and ", Nk[b], " keys (cache_seqlens[", b, "] + the keys it appends) "
           "in sequence ", b);
    }
  }
}

// Every list, once the index tensors are checked: row i of sequence b sees the keys [0, Nk) of the cache after
// the append, on the band around its diagonal.
void CheckSelectedKeys(const DecodeParams& p) {
  if (!p.key_indices.active()) return;
  std::int64_t max_keys = 0;
  for (std::int64_t b = 0; b < p.batch; ++b) max_keys = std::max(max_keys, p.cache_seqlens[b] + p.new_rows(b));
  const Band band = Band::Of(p);
  SelectedLists lists(p.key_indices, p.heads_kv, max_keys);
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t Nk = p.cache_seqlens[b] + p.new_rows(b), offset = DecodeDiagonalOffset(p, b, Nk);
    for (std::int64_t i = 0; i < p.query_rows(b); ++i) {
      const std::int64_t row = p.packed() ? p.cu_seqlens_q[b] + i : b * p.seqlen_q + i;
      lists.CheckRow({row, p.packed() ? row : -1, b, i, Nk, "cache_seqlens[b] + the keys it appends", i + offset,
                      band, p.causal});
    }
  }
}

}  // namespace

std::int64_t validation::CheckCapacity(const CacheLayout& c) {
  if (!c.paged()) {
    CheckSize("cache_seqlen_max", c.cache_seqlen_max, 0);
    return c.cache_seqlen_max;
  }
  CheckSize("page_size", c.page_size, 1);
  CheckSize("num_pages", c.num_pages, 0);
  CheckSize("max_pages", c.max_pages, 0);
  CheckSize("block_table_stride", c.block_table_stride, c.batch > 1 ? c.max_pages : 0);
  std::int64_t capacity;
  if (!MulAdd(c.max_pages, c.page_size, 0, &capacity)) {
    Fail("max_pages·page_size is too large (max_pages=", c.max_pages, " page_size=", c.page_size, ")");
  }
  return capacity;
}

TensorView validation::BlockTableView(const CacheLayout& c) {
  return TensorView{"block_table", c.block_table, 4, {{"batch", c.batch, c.block_table_stride}, {"page", c.max_pages, 1}}};
}

void validation::CheckPages(const CacheLayout& c, std::int64_t b, std::int64_t Nk) {
  const std::int32_t* pages = c.block_table + b * c.block_table_stride;
  for (std::int64_t n = 0; n < (Nk + c.page_size - 1) / c.page_size; ++n) {
    if (pages[n] < 0 || pages[n] >= c.num_pages) {
      Fail("block_table[", b, "][", n, "] = ", pages[n], " is out of range [0, num_pages=", c.num_pages, ")");
    }
  }
}

void validate(const DecodeParams& p) {
  CheckHeadSettings(p);
  CheckSize("batch", p.batch, 0);
  CheckSize("seqlen_q", p.seqlen_q, 0);
  CheckSize("seqlen_new", p.seqlen_new, 0);
  CheckSize("num_splits", p.num_splits, 0);
  CheckRange("rotary_dim", p.rotary_dim, 0, p.head_dim);
  if (p.rotary_dim % 2 != 0) Fail("rotary_dim must be even, got ", p.rotary_dim);
  const std::int64_t scale_groups = CheckCacheSettings(p);
  const std::int64_t capacity = CheckCapacity(CacheLayout::Of(p));
  CheckSelectionSettings(p);
  CheckSparsitySettings(p, capacity);
  if (p.packed()) CheckPackedRows(p);
  CheckDecodeTensors(p, scale_groups);
  CheckIndexTensors(p, capacity);
  CheckSelectedKeys(p);
  CheckSparsityValues(p);
}

}  // namespace flashattn
