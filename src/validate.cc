// All validation of the public entry points lives here, so that the algorithms may assume valid input.
// Every check runs before any output is touched: a call that throws has written nothing.
#include "validate.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "common/checked.h"
#include "decode/varlen.h"
#include "flashattn/backward.h"
#include "flashattn/decode.h"
#include "flashattn/flashattn.h"

namespace flashattn {
namespace {

void CheckSize(const char* name, std::int64_t value, std::int64_t min) {
  if (value < min) Fail(name, " must be >= ", min, ", got ", value);
}

void CheckRange(const char* name, std::int64_t value, std::int64_t min, std::int64_t max) {
  if (value < min || value > max) Fail(name, " must be in [", min, ", ", max, "], got ", value);
}

// Far above any machine's core count; asking OpenMP for more threads than the system can create crashes it.
constexpr std::int64_t kMaxThreads = 1024;

// dropout_p in [0, 1), and every element's generator counter ((b·Hq + h)·Nq + i)·⌈Nk/4⌉ + ⌊j/4⌋ in 64 bits.
void CheckDropout(const AttentionParams& p) {
  if (!(p.dropout_p >= 0.0f && p.dropout_p < 1.0f)) Fail("dropout_p must be in [0, 1), got ", p.dropout_p);
  std::int64_t counters;
  if (p.dropout_p > 0.0f &&
      (!MulAdd(p.batch, p.heads_q, 0, &counters) || !MulAdd(counters, p.seqlen_q, 0, &counters) ||
       !MulAdd(counters, (p.seqlen_k + 3) / 4, 0, &counters))) {
    Fail("dropout needs batch·heads_q·seqlen_q·⌈seqlen_k/4⌉ generator counters, more than 2^63 (batch=",
         p.batch, " heads_q=", p.heads_q, " seqlen_q=", p.seqlen_q, " seqlen_k=", p.seqlen_k, ")");
  }
}

}  // namespace

std::int64_t TensorView::NumElements() const {
  std::int64_t count = 1;
  for (const Dim& dim : dims) {
    if (dim.size == 0) return 0;
    if (!MulAdd(count, dim.size, 0, &count)) return INT64_MAX;
  }
  return count;
}

// Checks strides and sizes, that the furthest element's byte offset fits in int64, and that a non-empty
// tensor has data. Returns the half-open byte range the tensor touches (empty for an empty tensor).
ByteRange CheckTensor(const TensorView& tensor) {
  for (const Dim& dim : tensor.dims) {
    if (dim.stride < 0) {
      Fail(tensor.name, " stride of dimension '", dim.name, "' must be >= 0, got ", dim.stride);
    }
  }
  if (tensor.NumElements() == 0) return {};
  if (tensor.data == nullptr)
    Fail(tensor.name, " is a null pointer but holds ", tensor.NumElements(), " elements");
  std::int64_t last = 0;  // offset of the furthest element, in elements
  for (const Dim& dim : tensor.dims) {
    if (!MulAdd(dim.size - 1, dim.stride, last, &last)) {
      Fail(tensor.name, " is too large to index in 64 bits (dimension '", dim.name, "' of size ", dim.size,
           " with stride ", dim.stride, ")");
    }
  }
  std::int64_t end_bytes;
  if (!MulAdd(last + 1, tensor.element_bytes, 0, &end_bytes)) {
    Fail(tensor.name, " is too large to index in 64 bits (", last + 1, " elements of ", tensor.element_bytes,
         " bytes)");
  }
  const auto begin = reinterpret_cast<std::uintptr_t>(tensor.data);
  if (begin > UINTPTR_MAX - static_cast<std::uintptr_t>(end_bytes)) {
    Fail(tensor.name, " extends past the end of the address space");
  }
  return {begin, begin + static_cast<std::uintptr_t>(end_bytes)};
}

// An output's distinct indices must address distinct elements: sorted by stride, each dimension of size > 1
// must step over everything the smaller ones span.
void CheckNoSelfOverlap(const TensorView& tensor) {
  if (tensor.NumElements() == 0) return;  // an empty tensor has no elements to collide (its strides may be 0)
  std::vector<Dim> dims;
  for (const Dim& dim : tensor.dims)
    if (dim.size > 1) dims.push_back(dim);
  std::sort(dims.begin(), dims.end(), [](const Dim& a, const Dim& b) { return a.stride < b.stride; });
  std::int64_t span = 1;  // elements covered by the dimensions so far
  for (const Dim& dim : dims) {
    if (dim.stride < span) {
      Fail(tensor.name, " overlaps itself: dimension '", dim.name, "' has stride ", dim.stride,
           " but the smaller dimensions span ", span, " elements");
    }
    span = dim.stride * (dim.size - 1) + span;  // fits: CheckTensor bounded the furthest offset
  }
}

void CheckDisjoint(const TensorView& output, const ByteRange& output_range, const TensorView& input,
                   const ByteRange& input_range) {
  if (output_range.Overlaps(input_range)) {
    Fail(output.name, " overlaps ", input.name, " (", output.name, " bytes [", output_range.begin, ", ",
         output_range.end, "), ", input.name, " bytes [", input_range.begin, ", ", input_range.end, "))");
  }
}

void CheckOutputs(const std::vector<TensorView>& outputs, const std::vector<TensorView>& inputs) {
  std::vector<ByteRange> input_ranges;
  for (const TensorView& input : inputs) input_ranges.push_back(CheckTensor(input));
  std::vector<ByteRange> output_ranges;
  for (const TensorView& output : outputs) {
    output_ranges.push_back(CheckTensor(output));
    CheckNoSelfOverlap(output);
  }
  for (std::size_t o = 0; o < outputs.size(); ++o) {
    for (std::size_t i = 0; i < inputs.size(); ++i)
      CheckDisjoint(outputs[o], output_ranges[o], inputs[i], input_ranges[i]);
    for (std::size_t p = o + 1; p < outputs.size(); ++p)
      CheckDisjoint(outputs[o], output_ranges[o], outputs[p], output_ranges[p]);
  }
}

namespace {

void CheckDType(const char* name, DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
      return;
  }
  Fail(name, " has an unknown value ", static_cast<int>(dtype));
}

// The masks and score modifiers shared by AttentionParams and DecodeParams.
void CheckModifiers(std::int64_t window_left, std::int64_t window_right, float softcap,
                    const std::optional<float>& scale, std::int64_t alibi_batch_stride,
                    std::int64_t heads_q) {
  CheckSize("window_left", window_left, -1);
  CheckSize("window_right", window_right, -1);
  if (!(softcap >= 0.0f) || !std::isfinite(softcap)) {
    Fail("softcap must be finite and >= 0 (0 disables it), got ", softcap);
  }
  if (scale && !std::isfinite(*scale)) Fail("scale must be finite, got ", *scale);
  CheckSize("alibi_batch_stride", alibi_batch_stride, 0);
  if (alibi_batch_stride != 0 && alibi_batch_stride < heads_q) {
    Fail("alibi_batch_stride must be 0 (slopes per head) or >= heads_q=", heads_q, ", got ",
         alibi_batch_stride);
  }
}

TensorView AlibiView(const char* name, const float* slopes, std::int64_t batch_stride, std::int64_t batch,
                     std::int64_t heads_q) {
  return TensorView{
      name, slopes, 4, {{"batch", batch_stride == 0 ? 1 : batch, batch_stride}, {"head", heads_q, 1}}};
}

// float32 (batch, heads, seqlen), contiguous.
TensorView LseView(const char* name, const float* lse, std::int64_t batch, std::int64_t heads,
                   std::int64_t seqlen) {
  std::int64_t batch_stride;
  if (!MulAdd(heads, seqlen, 0, &batch_stride)) {
    Fail(name, " is too large to index in 64 bits (heads_q=", heads, " times seqlen_q=", seqlen, ")");
  }
  return TensorView{
      name, lse, 4, {{"batch", batch, batch_stride}, {"head", heads, seqlen}, {"seq", seqlen, 1}}};
}

// The names a call's tensors go by in messages: forward's own fields, or backward's `attention.` ones.
struct AttentionNames {
  const char *q, *k, *v, *o, *lse, *alibi, *mask, *mask_data;
};
constexpr AttentionNames kForwardNames{"q", "k", "v", "o", "lse", "alibi_slopes", "mask", "mask.data"};
constexpr AttentionNames kBackwardNames{"attention.q",    "attention.k",        "attention.v",
                                        "attention.o",    "attention.lse",      "attention.alibi_slopes",
                                        "attention.mask", "attention.mask.data"};

// Everything about AttentionParams but its tensors.
void CheckAttentionSizes(const AttentionParams& p) {
  CheckDType("dtype", p.dtype);
  CheckSize("batch", p.batch, 0);
  CheckSize("seqlen_q", p.seqlen_q, 0);
  CheckSize("seqlen_k", p.seqlen_k, 0);
  CheckSize("heads_q", p.heads_q, 1);
  CheckSize("heads_kv", p.heads_kv, 1);
  if (p.heads_q % p.heads_kv != 0) {
    Fail("heads_q must be a multiple of heads_kv, got heads_q=", p.heads_q, " heads_kv=", p.heads_kv);
  }
  CheckRange("head_dim", p.head_dim, 1, kMaxHeadDim);
  if (p.head_dim_v) CheckRange("head_dim_v", *p.head_dim_v, 1, kMaxHeadDim);
  CheckModifiers(p.window_left, p.window_right, p.softcap, p.scale, p.alibi_batch_stride, p.heads_q);
  CheckRange("num_threads", p.num_threads, 0, kMaxThreads);
  CheckDropout(p);
  CheckSize("tiling.fast_memory_bytes", p.tiling.fast_memory_bytes, 0);
  CheckSize("tiling.block_rows", p.tiling.block_rows, 0);
  CheckSize("tiling.block_cols", p.tiling.block_cols, 0);
  if (p.tiling.fast_memory_bytes > 0 && p.tiling.fast_memory_bytes < 4 * 4 * p.head_dim) {
    Fail("tiling.fast_memory_bytes must hold at least one row of Q, K, V and O (", 4 * 4 * p.head_dim,
         " bytes at head_dim=", p.head_dim, "), got ", p.tiling.fast_memory_bytes);
  }
}

struct CallTensors {
  std::vector<TensorView> inputs, outputs;
};

// q, k, v, the ALiBi slopes and the mask as inputs; o and lse as outputs.
CallTensors AttentionTensors(const AttentionParams& p, const AttentionNames& names) {
  const std::int64_t elem = static_cast<std::int64_t>(SizeOf(p.dtype));
  const std::int64_t dv = p.HeadDimV();
  auto view = [&](const char* name, const void* data, const Strides& s, std::int64_t seqlen,
                  std::int64_t heads, std::int64_t dim) {
    return TensorView{
        name,
        data,
        elem,
        {{"batch", p.batch, s.batch}, {"seq", seqlen, s.seq}, {"head", heads, s.head}, {"dim", dim, 1}}};
  };
  CallTensors t;
  t.inputs = {view(names.q, p.q, p.q_strides, p.seqlen_q, p.heads_q, p.head_dim),
              view(names.k, p.k, p.k_strides, p.seqlen_k, p.heads_kv, p.head_dim),
              view(names.v, p.v, p.v_strides, p.seqlen_k, p.heads_kv, dv)};
  if (p.alibi_slopes != nullptr) {
    t.inputs.push_back(AlibiView(names.alibi, p.alibi_slopes, p.alibi_batch_stride, p.batch, p.heads_q));
  }
  switch (p.mask.kind) {
    case MaskKind::kNone:
      break;
    case MaskKind::kBool:
    case MaskKind::kAdditive: {
      TensorView mask{names.mask,
                      p.mask.data,
                      p.mask.kind == MaskKind::kBool ? 1 : 4,
                      {{"batch", p.batch, p.mask.stride_batch},
                       {"head", p.heads_q, p.mask.stride_head},
                       {"row", p.seqlen_q, p.mask.stride_row},
                       {"col", p.seqlen_k, p.mask.stride_col}}};
      if (mask.NumElements() > 0 && mask.data == nullptr) {
        Fail(names.mask_data, " is a null pointer but mask.kind is set");
      }
      t.inputs.push_back(mask);
      break;
    }
    default:
      Fail(names.mask, ".kind has an unknown value ", static_cast<int>(p.mask.kind));
  }
  t.outputs = {view(names.o, p.o, p.o_strides, p.seqlen_q, p.heads_q, dv)};
  if (p.lse != nullptr) t.outputs.push_back(LseView(names.lse, p.lse, p.batch, p.heads_q, p.seqlen_q));
  return t;
}

}  // namespace

void Validate(const AttentionParams& p) {
  CheckAttentionSizes(p);
  const CallTensors t = AttentionTensors(p, kForwardNames);
  CheckOutputs(t.outputs, t.inputs);
}

void ValidateDropoutMask(const AttentionParams& p, const std::uint8_t* keep) {
  Validate(p);
  std::int64_t row = p.seqlen_k, head, batch;  // strides of the contiguous (batch, Hq, Nq, Nk) mask
  if (!MulAdd(p.seqlen_q, row, 0, &head) || !MulAdd(p.heads_q, head, 0, &batch)) {
    Fail("keep is too large to index in 64 bits (heads_q=", p.heads_q, " seqlen_q=", p.seqlen_q,
         " seqlen_k=", p.seqlen_k, ")");
  }
  const TensorView mask{"keep", keep, 1,
                        {{"batch", p.batch, batch},
                         {"head", p.heads_q, head},
                         {"row", p.seqlen_q, row},
                         {"col", p.seqlen_k, 1}}};
  CallTensors t = AttentionTensors(p, kForwardNames);
  t.inputs.insert(t.inputs.end(), t.outputs.begin(), t.outputs.end());  // o and lse are not written here
  CheckOutputs({mask}, t.inputs);
}

}  // namespace flashattn

// ---- decode.h: merge_attention_states, decode, forward_varlen --------------------------------------------

namespace flashattn {

void Validate(const MergeParams& p) {
  CheckDType("dtype", p.dtype);
  CheckSize("num_partials", p.num_partials, 0);
  CheckSize("batch", p.batch, 0);
  CheckSize("seqlen", p.seqlen, 0);
  CheckSize("heads", p.heads, 1);
  CheckRange("head_dim_v", p.head_dim_v, 1, kMaxHeadDim);
  std::int64_t rows, partial_elements;  // rows per partial; elements of one partial's O
  if (!MulAdd(p.batch, p.seqlen, 0, &rows) || !MulAdd(rows, p.heads, 0, &rows) ||
      !MulAdd(rows, p.head_dim_v, 0, &partial_elements)) {
    Fail("o_partials is too large to index in 64 bits (batch=", p.batch, " seqlen=", p.seqlen,
         " heads=", p.heads, " head_dim_v=", p.head_dim_v, ")");
  }
  const TensorView o_partials{
      "o_partials",
      p.o_partials,
      4,
      {{"partial", p.num_partials, partial_elements}, {"row", rows, p.head_dim_v}, {"dim", p.head_dim_v, 1}}};
  const TensorView lse_partials{
      "lse_partials", p.lse_partials, 4, {{"partial", p.num_partials, rows}, {"row", rows, 1}}};
  std::vector<TensorView> outputs = {TensorView{"o",
                                                p.o,
                                                static_cast<std::int64_t>(SizeOf(p.dtype)),
                                                {{"batch", p.batch, p.o_strides.batch},
                                                 {"seq", p.seqlen, p.o_strides.seq},
                                                 {"head", p.heads, p.o_strides.head},
                                                 {"dim", p.head_dim_v, 1}}}};
  if (p.lse != nullptr) outputs.push_back(LseView("lse", p.lse, p.batch, p.heads, p.seqlen));
  CheckOutputs(outputs, {o_partials, lse_partials});
  for (std::int64_t n = 0; n < p.num_partials * rows; ++n) {
    const float lse = p.lse_partials[n];
    if (std::isnan(lse) || lse == std::numeric_limits<float>::infinity()) {
      Fail("lse_partials must be finite or -inf, got ", lse, " at partial ", n / rows, " row ", n % rows);
    }
  }
}

void Validate(const DecodeParams& p) {
  CheckDType("dtype", p.dtype);
  CheckDType("cache_dtype", p.cache_dtype);
  if (p.dtype != p.cache_dtype) {
    Fail("dtype (", ToString(p.dtype), ") of q, k_new, v_new and o must equal cache_dtype (",
         ToString(p.cache_dtype), ")");
  }
  CheckSize("batch", p.batch, 0);
  CheckSize("seqlen_q", p.seqlen_q, 0);
  CheckSize("seqlen_new", p.seqlen_new, 0);
  CheckSize("heads_q", p.heads_q, 1);
  CheckSize("heads_kv", p.heads_kv, 1);
  if (p.heads_q % p.heads_kv != 0) {
    Fail("heads_q must be a multiple of heads_kv, got heads_q=", p.heads_q, " heads_kv=", p.heads_kv);
  }
  CheckRange("head_dim", p.head_dim, 1, kMaxHeadDim);
  CheckModifiers(p.window_left, p.window_right, p.softcap, p.scale, p.alibi_batch_stride, p.heads_q);
  CheckSize("num_splits", p.num_splits, 0);
  CheckRange("num_threads", p.num_threads, 0, kMaxThreads);
  CheckRange("rotary_dim", p.rotary_dim, 0, p.head_dim);
  if (p.rotary_dim % 2 != 0) Fail("rotary_dim must be even, got ", p.rotary_dim);

  // Capacity of each sequence's cache, in keys.
  std::int64_t capacity;
  if (p.Paged()) {
    CheckSize("page_size", p.page_size, 1);
    CheckSize("num_pages", p.num_pages, 0);
    CheckSize("max_pages", p.max_pages, 0);
    CheckSize("block_table_stride", p.block_table_stride, p.batch > 1 ? p.max_pages : 0);
    if (!MulAdd(p.max_pages, p.page_size, 0, &capacity)) {
      Fail("max_pages·page_size is too large (max_pages=", p.max_pages, " page_size=", p.page_size, ")");
    }
  } else {
    CheckSize("cache_seqlen_max", p.cache_seqlen_max, 0);
    capacity = p.cache_seqlen_max;
  }

  const std::int64_t elem = static_cast<std::int64_t>(SizeOf(p.dtype));
  auto view = [&](const char* name, const void* data, const Strides& s, std::int64_t outer,
                  std::int64_t seqlen, std::int64_t heads) {
    return TensorView{
        name,
        data,
        elem,
        {{"batch", outer, s.batch}, {"seq", seqlen, s.seq}, {"head", heads, s.head}, {"dim", p.head_dim, 1}}};
  };
  std::vector<TensorView> inputs = {view("q", p.q, p.q_strides, p.batch, p.seqlen_q, p.heads_q),
                                    TensorView{"cache_seqlens", p.cache_seqlens, 4, {{"batch", p.batch, 1}}}};
  if (p.seqlen_new > 0) {
    inputs.push_back(view("k_new", p.k_new, p.new_strides, p.batch, p.seqlen_new, p.heads_kv));
    inputs.push_back(view("v_new", p.v_new, p.new_strides, p.batch, p.seqlen_new, p.heads_kv));
  }
  if (p.Paged()) {
    inputs.push_back(TensorView{"block_table",
                                p.block_table,
                                4,
                                {{"batch", p.batch, p.block_table_stride}, {"page", p.max_pages, 1}}});
  }
  if (p.rotary_dim > 0) {
    CheckSize("rotary_max_pos", p.rotary_max_pos, 0);
    for (const auto& [name, table] :
         {std::pair{"rotary_cos", p.rotary_cos}, std::pair{"rotary_sin", p.rotary_sin}}) {
      inputs.push_back(TensorView{
          name, table, 4, {{"pos", p.rotary_max_pos, p.rotary_dim / 2}, {"dim", p.rotary_dim / 2, 1}}});
      if (p.rotary_max_pos > 0 && table == nullptr)
        Fail(name, " is a null pointer but rotary_dim=", p.rotary_dim);
    }
  }
  if (p.alibi_slopes != nullptr) {
    inputs.push_back(AlibiView("alibi_slopes", p.alibi_slopes, p.alibi_batch_stride, p.batch, p.heads_q));
  }

  const std::int64_t cache_outer = p.Paged() ? p.num_pages : p.batch;
  const std::int64_t cache_seq = p.Paged() ? p.page_size : p.cache_seqlen_max;
  const TensorView k_cache = view("k_cache", p.k_cache, p.cache_strides, cache_outer, cache_seq, p.heads_kv);
  const TensorView v_cache = view("v_cache", p.v_cache, p.cache_strides, cache_outer, cache_seq, p.heads_kv);
  std::vector<TensorView> outputs = {view("o", p.o, p.o_strides, p.batch, p.seqlen_q, p.heads_q)};
  if (p.lse != nullptr) outputs.push_back(LseView("lse", p.lse, p.batch, p.heads_q, p.seqlen_q));
  // The caches are written when keys are appended; then they must not overlap anything else either.
  if (p.seqlen_new > 0) {
    outputs.push_back(k_cache);
    outputs.push_back(v_cache);
  } else {
    inputs.push_back(k_cache);
    inputs.push_back(v_cache);
  }
  CheckOutputs(outputs, inputs);

  // Now the index tensors may be read: lengths, capacity, rotary positions, table entries.
  std::vector<std::int64_t> appended_slots;  // page·page_size + slot of every appended key (paged)
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t cached = p.cache_seqlens[b];
    if (cached < 0) Fail("cache_seqlens[", b, "] must be >= 0, got ", cached);
    std::int64_t Nk;
    const bool fits = MulAdd(1, cached, p.seqlen_new, &Nk);
    if (!fits || Nk > capacity) {
      Fail("cache_seqlens[", b, "] + seqlen_new = ", cached, " + ", p.seqlen_new, " = ",
           fits ? std::to_string(Nk) : std::string("more than int64 holds"),
           " exceeds the cache capacity of ", capacity, " keys",
           p.Paged() ? " (max_pages·page_size)" : " (cache_seqlen_max)");
    }
    if (p.rotary_dim > 0) {
      const std::int64_t last_pos = cached + std::max(p.seqlen_new, p.seqlen_q) - 1;
      if (last_pos >= p.rotary_max_pos) {
        Fail("rotary position ", last_pos, " of sequence ", b, " (cache_seqlens[", b, "]=", cached,
             ") is beyond the rotary tables' rotary_max_pos=", p.rotary_max_pos);
      }
    }
    if (!p.Paged()) continue;
    const std::int64_t pages_used = (Nk + p.page_size - 1) / p.page_size;
    for (std::int64_t n = 0; n < pages_used; ++n) {
      const std::int64_t page = p.block_table[b * p.block_table_stride + n];
      if (page < 0 || page >= p.num_pages) {
        Fail("block_table[", b, "][", n, "] = ", page, " is out of range [0, num_pages=", p.num_pages, ")");
      }
    }
    for (std::int64_t j = cached; j < Nk; ++j) {
      appended_slots.push_back(p.block_table[b * p.block_table_stride + j / p.page_size] * p.page_size +
                               j % p.page_size);
    }
  }
  std::sort(appended_slots.begin(), appended_slots.end());
  const auto twice = std::adjacent_find(appended_slots.begin(), appended_slots.end());
  if (twice != appended_slots.end()) {
    Fail("two appended keys would be written to the same cache slot (page ", *twice / p.page_size, ", slot ",
         *twice % p.page_size, "): block_table pages overlap where sequences append");
  }
}

void Validate(const VarlenParams& p) {
  const AttentionParams& base = p.base;
  CheckRange("batch", p.batch, 0, INT64_MAX - 1);  // cu_seqlens hold batch + 1 entries
  CheckSize("total_q", p.total_q, 0);
  CheckSize("total_k", p.total_k, 0);
  CheckSize("max_seqlen_q", p.max_seqlen_q, 0);
  CheckSize("max_seqlen_k", p.max_seqlen_k, 0);
  if (base.mask.kind != MaskKind::kNone) Fail("base.mask is not supported by forward_varlen");
  if (base.dropout_p != 0.0f) Fail("base.dropout_p is not supported by forward_varlen, got ", base.dropout_p);
  // The packed tensors are one sequence of total_q queries and total_k keys; the per-sequence ALiBi rows and
  // cu_seqlens are inputs too. The scalars are checked before the packed strides are derived from them.
  AttentionParams sizes = base;
  sizes.batch = 1, sizes.seqlen_q = p.total_q, sizes.seqlen_k = p.total_k, sizes.alibi_batch_stride = 0;
  CheckAttentionSizes(sizes);
  std::int64_t row_elements;
  if (!MulAdd(base.heads_q, std::max(base.head_dim, base.HeadDimV()), 0, &row_elements)) {
    Fail("a packed row of heads_q=", base.heads_q,
         " heads of head_dim=", std::max(base.head_dim, base.HeadDimV()),
         " is too large to index in 64 bits");
  }
  CheckSize("base.alibi_batch_stride", base.alibi_batch_stride, 0);
  if (base.alibi_batch_stride != 0 && base.alibi_batch_stride < base.heads_q) {
    Fail("base.alibi_batch_stride must be 0 (slopes per head) or >= heads_q=", base.heads_q, ", got ",
         base.alibi_batch_stride);
  }
  AttentionParams packed = decoding::PackedVarlenParams(p);
  packed.alibi_slopes = nullptr;  // its rows are per sequence, added below
  CallTensors t = AttentionTensors(packed, kForwardNames);
  if (base.alibi_slopes != nullptr) {
    t.inputs.push_back(
        AlibiView("alibi_slopes", base.alibi_slopes, base.alibi_batch_stride, p.batch, base.heads_q));
  }
  const TensorView cu_q{"cu_seqlens_q", p.cu_seqlens_q, 4, {{"batch+1", p.batch + 1, 1}}};
  const TensorView cu_k{"cu_seqlens_k", p.cu_seqlens_k, 4, {{"batch+1", p.batch + 1, 1}}};
  t.inputs.push_back(cu_q);
  t.inputs.push_back(cu_k);
  CheckOutputs(t.outputs, t.inputs);
  for (const auto& [name, cu, total, max_len] :
       {std::tuple{"cu_seqlens_q", p.cu_seqlens_q, p.total_q, p.max_seqlen_q},
        std::tuple{"cu_seqlens_k", p.cu_seqlens_k, p.total_k, p.max_seqlen_k}}) {
    if (cu[0] != 0) Fail(name, "[0] must be 0, got ", cu[0]);
    for (std::int64_t b = 0; b < p.batch; ++b) {
      if (cu[b + 1] < cu[b]) {
        Fail(name, " must be non-decreasing, got ", name, "[", b, "]=", cu[b], " > ", name, "[", b + 1,
             "]=", cu[b + 1]);
      }
    }
    for (std::int64_t b = 0; b < p.batch; ++b) {
      if (cu[b + 1] - cu[b] > max_len) {
        Fail("sequence ", b, " has length ", cu[b + 1] - cu[b], " in ", name, ", beyond its max_seqlen of ",
             max_len);
      }
    }
    if (cu[p.batch] != total) {
      Fail(name, " must end at the packed length ", total, ", got ", name, "[", p.batch, "]=", cu[p.batch]);
    }
  }
}

}  // namespace flashattn

// ---- backward.h: backward
// -----------------------------------------------------------------------------------

namespace flashattn {

void Validate(const BackwardParams& p) {
  const AttentionParams& a = p.attention;
  CheckAttentionSizes(a);  // shapes, modifiers, dropout, as the forward pass saw them
  const std::int64_t Hq = a.heads_q, Nq = a.seqlen_q;
  if (a.lse == nullptr && LseView("attention.lse", a.lse, a.batch, Hq, Nq).NumElements() > 0) {
    Fail("attention.lse is required by backward (the forward pass's LSE)");
  }
  // The forward call's tensors, o and lse included, are all read; the gradients are written.
  CallTensors forward = AttentionTensors(a, kBackwardNames);
  std::vector<TensorView> inputs = forward.inputs;
  inputs.insert(inputs.end(), forward.outputs.begin(), forward.outputs.end());
  const std::int64_t elem = static_cast<std::int64_t>(SizeOf(a.dtype));
  auto view = [&](const char* name, const void* data, const Strides& s, std::int64_t seqlen,
                  std::int64_t heads, std::int64_t dim) {
    return TensorView{
        name,
        data,
        elem,
        {{"batch", a.batch, s.batch}, {"seq", seqlen, s.seq}, {"head", heads, s.head}, {"dim", dim, 1}}};
  };
  inputs.push_back(view("d_o", p.d_o, p.do_strides, Nq, Hq, a.HeadDimV()));
  const std::vector<TensorView> outputs = {
      view("dq", p.dq, p.dq_strides, Nq, Hq, a.head_dim),
      view("dk", p.dk, p.dk_strides, a.seqlen_k, a.heads_kv, a.head_dim),
      view("dv", p.dv, p.dv_strides, a.seqlen_k, a.heads_kv, a.HeadDimV())};
  CheckOutputs(outputs, inputs);
  // The LSE is read as the softmax's normalizer: a finite value, or −∞ for a row that saw no key.
  for (std::int64_t n = 0; n < a.batch * Hq * Nq; ++n) {
    if (std::isnan(a.lse[n]) || a.lse[n] == std::numeric_limits<float>::infinity()) {
      Fail("attention.lse must be finite or -inf, got ", a.lse[n], " at (batch, head, row) = (",
           n / (Hq * Nq), ", ", n / Nq % Hq, ", ", n % Nq, ")");
    }
  }
}

}  // namespace flashattn
