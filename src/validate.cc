// All validation of the public entry points lives here, so that the algorithms may assume valid input.
// Every check runs before any output is touched: a call that throws has written nothing.
//
// The checks build on each other: the settings every attention call shares (heads, head dimensions, score
// modifiers, dropout, tiling, threads) are checked by one function that forward, varlen and backward use,
// and decode uses its parts; every call describes its tensors as TensorViews, checked for sizes, strides,
// null pointers and overlaps by CheckOutputs; only then are index tensors (cu_seqlens, block tables) and
// LSE values read.
#include "validate.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "common/cache_element_traits.h"
#include "common/checked.h"
#include "common/element.h"
#include "common/quantize.h"
#include "common/score.h"
#include "flashattn/backward.h"
#include "flashattn/decode.h"
#include "flashattn/forward.h"
#include "flashattn/merge.h"
#include "flashattn/types.h"
#include "flashattn/varlen.h"
#include "varlen/sequences.h"

namespace flashattn {
namespace {

void CheckSize(const char* name, std::int64_t value, std::int64_t min) {
  if (value < min) Fail(name, " must be >= ", min, ", got ", value);
}

void CheckRange(const char* name, std::int64_t value, std::int64_t min, std::int64_t max) {
  if (value < min || value > max) Fail(name, " must be in [", min, ", ", max, "], got ", value);
}

// ---- Tensors ----------------------------------------------------------------------------------------------

struct Dim {
  const char* name;
  std::int64_t size;
  std::int64_t stride;  // in elements
};

// A strided tensor as the validator sees it: where it is, how large its elements are, its dimensions.
struct TensorView {
  const char* name;
  const void* data;
  std::int64_t element_bytes;
  std::vector<Dim> dims;

  // INT64_MAX if the count overflows.
  std::int64_t NumElements() const {
    std::int64_t count = 1;
    for (const Dim& dim : dims) {
      if (dim.size == 0) return 0;
      if (!MulAdd(count, dim.size, 0, &count)) return INT64_MAX;
    }
    return count;
  }
};

struct ByteRange {
  std::uintptr_t begin = 0;
  std::uintptr_t end = 0;  // exclusive; begin == end is empty
  bool Overlaps(const ByteRange& other) const {
    return begin < end && other.begin < other.end && begin < other.end && other.begin < end;
  }
};

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

// Checks every tensor, that no output overlaps itself, an input, or another output.
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

// A (batch, seq, head, dim) tensor of `element_bytes` elements, its feature stride 1.
TensorView BatchTensor(const char* name, const void* data, std::int64_t element_bytes, const Strides& s,
                       std::int64_t batch, std::int64_t seqlen, std::int64_t heads, std::int64_t dim) {
  return TensorView{
      name,
      data,
      element_bytes,
      {{"batch", batch, s.batch}, {"seq", seqlen, s.seq}, {"head", heads, s.head}, {"dim", dim, 1}}};
}

TensorView BatchTensor(const char* name, const void* data, DType dtype, const Strides& s, std::int64_t batch,
                       std::int64_t seqlen, std::int64_t heads, std::int64_t dim) {
  return BatchTensor(name, data, static_cast<std::int64_t>(size_of(dtype)), s, batch, seqlen, heads, dim);
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

// The forward pass's LSE as backward reads it: present, and each value the normalizer of a softmax, so
// finite, or −∞ for a row that saw no key. RequireLse runs before the tensors are checked, CheckLseValues
// after.
void RequireLse(const char* name, const char* call, const float* lse, std::int64_t batch, std::int64_t heads,
                std::int64_t seqlen) {
  if (lse == nullptr && LseView(name, lse, batch, heads, seqlen).NumElements() > 0) {
    Fail(name, " is required by ", call, " (the forward pass's LSE)");
  }
}

void CheckLseValues(const char* name, const float* lse, std::int64_t batch, std::int64_t heads,
                    std::int64_t seqlen) {
  for (std::int64_t n = 0; n < batch * heads * seqlen; ++n) {
    if (std::isnan(lse[n]) || lse[n] == std::numeric_limits<float>::infinity()) {
      Fail(name, " must be finite or -inf, got ", lse[n], " at (batch, head, row) = (", n / (heads * seqlen),
           ", ", n / seqlen % heads, ", ", n % seqlen, ")");
    }
  }
}

// ---- Quantized caches (decode, quantize_kv) ----------------------------------------------------------------

void CheckQuantization(const char* element_name, CacheElement element, const char* granularity_name,
                       ScaleGranularity granularity) {
  if (!IsCacheElement(element)) Fail(element_name, " has an unknown value ", static_cast<int>(element));
  switch (granularity) {
    case ScaleGranularity::kPerToken:
    case ScaleGranularity::kPerHead:
    case ScaleGranularity::kPerTensor:
      return;
  }
  Fail(granularity_name, " has an unknown value ", static_cast<int>(granularity));
}

// Scales per group of `group_size` features: only per token, 0 (the whole row) or a divisor of d. Returns
// the groups per row.
std::int64_t CheckGroupSize(const char* name, std::int64_t group_size, ScaleGranularity granularity,
                            std::int64_t d) {
  if (granularity != ScaleGranularity::kPerToken) {
    if (group_size != 0) {
      Fail(name, " must be 0 with ", to_string(granularity), " scales (groups divide per-token scales), got ",
           group_size);
    }
    return 1;
  }
  CheckRange(name, group_size, 0, d);
  if (group_size > 0 && d % group_size != 0) Fail(name, " must divide head_dim=", d, ", got ", group_size);
  return group_size > 0 ? d / group_size : 1;
}

// float32 scales: per token (outer, seqlen, heads, groups) with strides s, per head (heads), per tensor one.
TensorView ScaleView(const char* name, const float* scales, ScaleGranularity granularity, const Strides& s,
                     std::int64_t outer, std::int64_t seqlen, std::int64_t heads, std::int64_t groups) {
  switch (granularity) {
    case ScaleGranularity::kPerToken:
      return TensorView{name, scales, 4,
                        {{"batch", outer, s.batch}, {"seq", seqlen, s.seq}, {"head", heads, s.head},
                         {"group", groups, 1}}};
    case ScaleGranularity::kPerHead:
      return TensorView{name, scales, 4, {{"head", heads, 1}}};
    case ScaleGranularity::kPerTensor:
      break;
  }
  return TensorView{name, scales, 4, {{"scale", 1, 1}}};
}

// Whether n elements hold an inf or a NaN: all exponent bits set. Tested on the raw bits a row at a time, a loop
// the compiler vectorizes, because quantize_kv's whole input passes through here first.
template <typename T, typename Bits>
bool HoldsNonFinite(const void* row, std::int64_t n, Bits exponent) {
  const auto* x = static_cast<const T*>(row);
  bool non_finite = false;
  for (std::int64_t e = 0; e < n; ++e) non_finite |= (std::bit_cast<Bits>(x[e]) & exponent) == exponent;
  return non_finite;
}

// Values about to be quantized must be finite: an inf or NaN has no scale.
void CheckFinite(const char* name, const void* x, DType dtype, const Strides& s, std::int64_t outer,
                 std::int64_t seqlen, std::int64_t heads, std::int64_t d) {
  const std::int64_t element_bytes = static_cast<std::int64_t>(size_of(dtype));
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < seqlen; ++i)
      for (std::int64_t h = 0; h < heads; ++h) {
        const std::int64_t offset = o * s.batch + i * s.seq + h * s.head;
        const void* row = static_cast<const char*>(x) + offset * element_bytes;
        const bool non_finite = dtype == DType::kF32 ? HoldsNonFinite<float, std::uint32_t>(row, d, 0x7f800000u)
                                : dtype == DType::kF16
                                    ? HoldsNonFinite<std::uint16_t, std::uint16_t>(row, d, 0x7c00u)
                                    : HoldsNonFinite<std::uint16_t, std::uint16_t>(row, d, 0x7f80u);
        if (!non_finite) continue;
        for (std::int64_t e = 0; e < d; ++e) {
          const float value = LoadAsFloat(x, dtype, offset + e);
          if (!std::isfinite(value)) {
            Fail(name, " holds ", value, " at (", o, ", ", i, ", ", h, ", ", e,
                 "): a quantized cache stores finite values only");
          }
        }
      }
}

// A fixed scale quantizes appended values: finite and > 0.
void CheckFixedScales(const TensorView& scales) {
  const auto* values = static_cast<const float*>(scales.data);
  for (std::int64_t n = 0; n < scales.NumElements(); ++n) {
    if (!(values[n] > 0.0f) || !std::isfinite(values[n])) {
      Fail(scales.name, "[", n, "] must be finite and > 0 to quantize appended keys, got ", values[n]);
    }
  }
}

// The attention sinks, one logit per query head: each finite, or −∞ for no sink. NaN and +∞ are refused
// rather than propagated: a NaN sink would turn every row of its head into NaN, +∞ every O into 0.
void CheckSinkValues(const char* name, const float* sinks, std::int64_t heads_q) {
  if (sinks == nullptr) return;
  for (std::int64_t h = 0; h < heads_q; ++h) {
    if (std::isnan(sinks[h]) || sinks[h] == std::numeric_limits<float>::infinity()) {
      Fail(name, " must be finite or -inf, got ", sinks[h], " at head ", h);
    }
  }
}

// ---- Settings shared by the calls -------------------------------------------------------------------------

// Far above any machine's core count; asking OpenMP for more threads than the system can create crashes it.
constexpr std::int64_t kMaxThreads = 1024;

void CheckThreads(int num_threads) { CheckRange("num_threads", num_threads, 0, kMaxThreads); }

void CheckDType(const char* name, DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
      return;
  }
  Fail(name, " has an unknown value ", static_cast<int>(dtype));
}

void CheckHeads(std::int64_t heads_q, std::int64_t heads_kv) {
  CheckSize("heads_q", heads_q, 1);
  CheckSize("heads_kv", heads_kv, 1);
  if (heads_q % heads_kv != 0) {
    Fail("heads_q must be a multiple of heads_kv, got heads_q=", heads_q, " heads_kv=", heads_kv);
  }
}

void CheckModifiers(const ScoreSettings& m, std::int64_t heads_q) {
  CheckSize("window_left", m.window_left, -1);
  CheckSize("window_right", m.window_right, -1);
  if (!(m.softcap >= 0.0f) || !std::isfinite(m.softcap)) {
    Fail("softcap must be finite and >= 0 (0 disables it), got ", m.softcap);
  }
  if (m.scale && !std::isfinite(*m.scale)) Fail("scale must be finite, got ", *m.scale);
  CheckSize("alibi_batch_stride", m.alibi_batch_stride, 0);
  if (m.alibi_batch_stride != 0 && m.alibi_batch_stride < heads_q) {
    Fail("alibi_batch_stride must be 0 (slopes per head) or >= heads_q=", heads_q, ", got ",
         m.alibi_batch_stride);
  }
}

// dropout_p in [0, 1), and every element's generator counter ((b·Hq + h)·Nq + i)·⌈Nk/4⌉ + ⌊j/4⌋ in 64 bits.
void CheckDropout(const AttentionSettings& s, std::int64_t batch, std::int64_t seqlen_q, std::int64_t seqlen_k) {
  if (!(s.dropout_p >= 0.0f && s.dropout_p < 1.0f)) Fail("dropout_p must be in [0, 1), got ", s.dropout_p);
  std::int64_t counters;
  if (s.dropout_p > 0.0f &&
      (!MulAdd(batch, s.heads_q, 0, &counters) || !MulAdd(counters, seqlen_q, 0, &counters) ||
       !MulAdd(counters, (seqlen_k + 3) / 4, 0, &counters))) {
    Fail("dropout needs batch·heads_q·seqlen_q·⌈seqlen_k/4⌉ generator counters, more than 2^63 (batch=",
         batch, " heads_q=", s.heads_q, " seqlen_q=", seqlen_q, " seqlen_k=", seqlen_k, ")");
  }
}

// Everything about a batch of `batch` problems of seqlen_q × seqlen_k with these settings but its tensors.
void CheckAttentionSizes(const AttentionSettings& s, std::int64_t batch, std::int64_t seqlen_q,
                         std::int64_t seqlen_k) {
  CheckDType("dtype", s.dtype);
  CheckSize("batch", batch, 0);
  CheckSize("seqlen_q", seqlen_q, 0);
  CheckSize("seqlen_k", seqlen_k, 0);
  CheckHeads(s.heads_q, s.heads_kv);
  CheckRange("head_dim", s.head_dim, 1, kMaxHeadDim);
  if (s.head_dim_v) CheckRange("head_dim_v", *s.head_dim_v, 1, kMaxHeadDim);
  CheckModifiers(s, s.heads_q);
  CheckThreads(s.num_threads);
  CheckDropout(s, batch, seqlen_q, seqlen_k);
  CheckSize("tiling.fast_memory_bytes", s.tiling.fast_memory_bytes, 0);
  CheckSize("tiling.block_rows", s.tiling.block_rows, 0);
  CheckSize("tiling.block_cols", s.tiling.block_cols, 0);
  if (s.tiling.fast_memory_bytes > 0 && s.tiling.fast_memory_bytes < 4 * 4 * s.head_dim) {
    Fail("tiling.fast_memory_bytes must hold at least one row of Q, K, V and O (", 4 * 4 * s.head_dim,
         " bytes at head_dim=", s.head_dim, "), got ", s.tiling.fast_memory_bytes);
  }
}

// One side of block_position: [start, start + seqlen) inside [0, total), total −1 meaning seqlen. Totals up to
// kUnboundedReach, so that a diagonal plus a band's reach cannot overflow.
void CheckBlockSide(const char* start_name, std::int64_t start, const char* seqlen_name, std::int64_t seqlen,
                    const char* total_name, std::int64_t total) {
  CheckSize(start_name, start, 0);
  CheckRange(total_name, total, -1, kUnboundedReach);
  const std::int64_t resolved = total < 0 ? seqlen : total;
  if (start > resolved - seqlen) {
    Fail(start_name, " + ", seqlen_name, " = ", start, " + ", seqlen, " exceeds ", total_name, " = ", resolved,
         total < 0 ? " (-1: the call's own length)" : "");
  }
}

// The block position, then dropout's generator counters over the whole problem it is a block of.
void CheckAttentionSizes(const AttentionParams& p) {
  CheckAttentionSizes(p, p.batch, p.seqlen_q, p.seqlen_k);
  const BlockPosition& at = p.block_position;
  CheckBlockSide("block_position.query_start", at.query_start, "seqlen_q", p.seqlen_q,
                 "block_position.total_seqlen_q", at.total_seqlen_q);
  CheckBlockSide("block_position.key_start", at.key_start, "seqlen_k", p.seqlen_k, "block_position.total_seqlen_k",
                 at.total_seqlen_k);
  const BlockPlacement placement = BlockPlacement::Of(p);
  CheckDropout(p, p.batch, placement.total_q, placement.total_k);
}

// ---- The tensors of an attention call ---------------------------------------------------------------------

// The names a call's tensors go by in messages: forward's own fields, backward's `attention.` ones, or
// backward_varlen's `forward.` ones.
struct AttentionNames {
  const char *q, *k, *v, *o, *lse, *alibi, *mask, *mask_data, *sinks;
};
constexpr AttentionNames kForwardNames{"q", "k", "v", "o", "lse", "alibi_slopes", "mask", "mask.data", "sinks"};
constexpr AttentionNames kBackwardNames{"attention.q",    "attention.k",         "attention.v",
                                        "attention.o",    "attention.lse",       "attention.alibi_slopes",
                                        "attention.mask", "attention.mask.data", "attention.sinks"};
constexpr AttentionNames kVarlenBackwardNames{"forward.q",    "forward.k",         "forward.v",
                                              "forward.o",    "forward.lse",       "forward.alibi_slopes",
                                              "forward.mask", "forward.mask.data", "forward.sinks"};

// float32 (Hq): the attention sinks, or their gradient.
TensorView SinksView(const char* name, const float* sinks, std::int64_t heads_q) {
  return TensorView{name, sinks, 4, {{"head", heads_q, 1}}};
}

struct CallTensors {
  std::vector<TensorView> inputs, outputs;

  // The outputs become inputs: a call that reads the forward pass's results, or writes something else.
  std::vector<TensorView> AllRead() const {
    std::vector<TensorView> read = inputs;
    read.insert(read.end(), outputs.begin(), outputs.end());
    return read;
  }
};

// q, k, v, the ALiBi slopes and the mask as inputs; o and lse as outputs.
CallTensors AttentionTensors(const AttentionParams& p, const AttentionNames& names) {
  const std::int64_t dv = p.value_head_dim();
  CallTensors t;
  t.inputs = {BatchTensor(names.q, p.q, p.dtype, p.q_strides, p.batch, p.seqlen_q, p.heads_q, p.head_dim),
              BatchTensor(names.k, p.k, p.dtype, p.k_strides, p.batch, p.seqlen_k, p.heads_kv, p.head_dim),
              BatchTensor(names.v, p.v, p.dtype, p.v_strides, p.batch, p.seqlen_k, p.heads_kv, dv)};
  if (p.alibi_slopes != nullptr) {
    t.inputs.push_back(AlibiView(names.alibi, p.alibi_slopes, p.alibi_batch_stride, p.batch, p.heads_q));
  }
  if (p.sinks != nullptr) t.inputs.push_back(SinksView(names.sinks, p.sinks, p.heads_q));
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
  t.outputs = {BatchTensor(names.o, p.o, p.dtype, p.o_strides, p.batch, p.seqlen_q, p.heads_q, dv)};
  if (p.lse != nullptr) t.outputs.push_back(LseView(names.lse, p.lse, p.batch, p.heads_q, p.seqlen_q));
  return t;
}

// dO, read; dQ, dK, dV and dsinks, if requested, written (dsinks only when there are sinks).
void AddGradientTensors(const BackwardParams& p, const AttentionNames& names, CallTensors* t) {
  const AttentionParams& a = p.attention;
  const std::int64_t dv = a.value_head_dim();
  if (p.dsinks != nullptr && a.sinks == nullptr) {
    Fail("dsinks is set but ", names.sinks, " is null: there is no sink to differentiate");
  }
  if (p.dsinks != nullptr) t->outputs.push_back(SinksView("dsinks", p.dsinks, a.heads_q));
  t->inputs.push_back(BatchTensor("d_o", p.d_o, a.dtype, p.do_strides, a.batch, a.seqlen_q, a.heads_q, dv));
  t->outputs.push_back(
      BatchTensor("dq", p.dq, a.dtype, p.dq_strides, a.batch, a.seqlen_q, a.heads_q, a.head_dim));
  t->outputs.push_back(
      BatchTensor("dk", p.dk, a.dtype, p.dk_strides, a.batch, a.seqlen_k, a.heads_kv, a.head_dim));
  t->outputs.push_back(BatchTensor("dv", p.dv, a.dtype, p.dv_strides, a.batch, a.seqlen_k, a.heads_kv, dv));
}

// ---- Varlen -----------------------------------------------------------------------------------------------

// The sizes of a varlen call, then its tensors: the packed ones as one batch-1 problem of total_q × total_k,
// every sequence's ALiBi row and cu_seqlens.
CallTensors VarlenTensors(const VarlenParams& p, const AttentionNames& names) {
  CheckRange("batch", p.batch, 0, INT64_MAX - 1);  // cu_seqlens hold batch + 1 entries
  CheckSize("total_q", p.total_q, 0);
  CheckSize("total_k", p.total_k, 0);
  CheckSize("max_seqlen_q", p.max_seqlen_q, 0);
  CheckSize("max_seqlen_k", p.max_seqlen_k, 0);
  CheckAttentionSizes(p, 1, p.total_q, p.total_k);
  const BlockPosition& at = p.block_position;
  if (at != BlockPosition{}) {
    Fail("block_position must be the default {query_start=0, key_start=0, total_seqlen_q=-1, total_seqlen_k=-1} "
         "in a varlen call (each sequence is its own problem), got {", at.query_start, ", ", at.key_start, ", ",
         at.total_seqlen_q, ", ", at.total_seqlen_k, "}");
  }
  // The packed strides are derived from these sizes.
  const std::int64_t widest = std::max(p.head_dim, p.value_head_dim());
  std::int64_t row_elements;
  if (!MulAdd(p.heads_q, widest, 0, &row_elements)) {
    Fail("a packed row of heads_q=", p.heads_q, " heads of head_dim=", widest, " is too large to index in 64 bits");
  }
  CallTensors t = AttentionTensors(varlen::PackedProblem(p), names);
  if (p.alibi_slopes != nullptr) {
    t.inputs.push_back(AlibiView(names.alibi, p.alibi_slopes, p.alibi_batch_stride, p.batch, p.heads_q));
  }
  t.inputs.push_back(TensorView{"cu_seqlens_q", p.cu_seqlens_q, 4, {{"batch+1", p.batch + 1, 1}}});
  t.inputs.push_back(TensorView{"cu_seqlens_k", p.cu_seqlens_k, 4, {{"batch+1", p.batch + 1, 1}}});
  return t;
}

// The sequence boundaries, once their tensors are known to be readable.
void CheckCuSeqlens(const VarlenParams& p) {
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

}  // namespace

// ---- The entry points -------------------------------------------------------------------------------------

void validate(const AttentionParams& p) {
  CheckAttentionSizes(p);
  const CallTensors t = AttentionTensors(p, kForwardNames);
  CheckOutputs(t.outputs, t.inputs);
  CheckSinkValues("sinks", p.sinks, p.heads_q);
}

void ValidateDropoutMask(const AttentionParams& p, const std::uint8_t* keep) {
  validate(p);
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
  CheckOutputs({mask}, AttentionTensors(p, kForwardNames).AllRead());  // o and lse are not written here
}

void validate(const VarlenParams& p) {
  const CallTensors t = VarlenTensors(p, kForwardNames);
  CheckOutputs(t.outputs, t.inputs);
  CheckSinkValues("sinks", p.sinks, p.heads_q);
  CheckCuSeqlens(p);
}

void ValidateDropoutMask(const VarlenParams& p, const std::uint8_t* keep) {
  validate(p);
  std::int64_t elements = 0;  // Σ_b Hq·Nq_b·Nk_b
  for (std::int64_t b = 0; b < p.batch; ++b) {
    std::int64_t pairs;
    const std::int64_t Nq = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
    const std::int64_t Nk = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
    if (!MulAdd(Nq, Nk, 0, &pairs) || !MulAdd(pairs, p.heads_q, elements, &elements)) {
      Fail("keep is too large to index in 64 bits (heads_q=", p.heads_q, ", sequence ", b, " of seqlen_q=", Nq,
           " seqlen_k=", Nk, ")");
    }
  }
  const TensorView mask{"keep", keep, 1, {{"element", elements, 1}}};
  CheckOutputs({mask}, VarlenTensors(p, kForwardNames).AllRead());  // o and lse are not written here
}

void validate(const MergeParams& p) {
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
  std::vector<TensorView> outputs = {
      BatchTensor("o", p.o, p.dtype, p.o_strides, p.batch, p.seqlen, p.heads, p.head_dim_v)};
  if (p.lse != nullptr) outputs.push_back(LseView("lse", p.lse, p.batch, p.heads, p.seqlen));
  std::vector<TensorView> inputs = {o_partials, lse_partials};
  if (p.sinks != nullptr) inputs.push_back(SinksView("sinks", p.sinks, p.heads));
  CheckOutputs(outputs, inputs);
  CheckSinkValues("sinks", p.sinks, p.heads);
  for (std::int64_t n = 0; n < p.num_partials * rows; ++n) {
    const float lse = p.lse_partials[n];
    if (std::isnan(lse) || lse == std::numeric_limits<float>::infinity()) {
      Fail("lse_partials must be finite or -inf, got ", lse, " at partial ", n / rows, " row ", n % rows);
    }
  }
}

void validate(const DecodeParams& p) {
  CheckDType("dtype", p.dtype);
  CheckQuantization("cache_element", p.cache_element, "scale_granularity", p.scale_granularity);
  const bool quantized = Quantized(p.cache_element);
  if (!quantized) {
    CheckDType("cache_dtype", p.cache_dtype);
    if (p.k_scale != nullptr || p.v_scale != nullptr) {
      Fail("k_scale and v_scale must be null for a float cache (cache_element=float)");
    }
  }
  CheckSize("batch", p.batch, 0);
  CheckSize("seqlen_q", p.seqlen_q, 0);
  CheckSize("seqlen_new", p.seqlen_new, 0);
  CheckHeads(p.heads_q, p.heads_kv);
  CheckRange("head_dim", p.head_dim, 1, kMaxHeadDim);
  if (p.head_dim_v) CheckRange("head_dim_v", *p.head_dim_v, 1, kMaxHeadDim);
  const std::int64_t dv = p.value_head_dim();
  if (p.values_in_keys()) {
    if (dv > p.head_dim) {
      Fail("head_dim_v=", dv, " exceeds head_dim=", p.head_dim,
           ": V read inside the K cache (v_cache == k_cache) is the first head_dim_v features of each K row");
    }
    if (p.seqlen_new > 0 && p.v_new != nullptr) {
      Fail("v_new must be null when V is read inside the K cache (v_cache == k_cache): an append writes k_new's "
           "row once");
    }
  }
  if (quantized && p.values_in_keys() && p.v_scale != nullptr && p.v_scale != p.k_scale) {
    Fail("v_scale must be null or k_scale when V is read inside the K cache (v_cache == k_cache): V's values "
         "are K's, scaled by k_scale");
  }
  // the integer options need a cache whose codes multiply as integers
  const bool integer_dots =
      VisitCacheElement(p.cache_element, [](auto traits) { return decltype(traits)::kIntegerDots; });
  if (p.quantize_query_int8 && !integer_dots) {
    Fail("quantize_query_int8 needs an int8 cache (cache_element=int8), got cache_element=",
         to_string(p.cache_element));
  }
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
  if (p.quantize_probs_u8 && !integer_dots) {
    Fail("quantize_probs_u8 needs an int8 cache (cache_element=int8), got cache_element=",
         to_string(p.cache_element));
  }
  if (p.quantize_probs_u8 && ScaleGroupSize(p.scale_group_size, p.head_dim) != p.head_dim) {
    Fail("quantize_probs_u8 needs one V scale per row (scale_group_size 0), got scale_group_size=",
         p.scale_group_size);
  }
  CheckModifiers(p, p.heads_q);
  CheckSize("num_splits", p.num_splits, 0);
  CheckThreads(p.num_threads);
  CheckRange("rotary_dim", p.rotary_dim, 0, p.head_dim);
  if (p.rotary_dim % 2 != 0) Fail("rotary_dim must be even, got ", p.rotary_dim);

  // Capacity of each sequence's cache, in keys.
  std::int64_t capacity;
  if (p.paged()) {
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

  auto view = [&](const char* name, const void* data, const Strides& s, std::int64_t outer,
                  std::int64_t seqlen, std::int64_t heads, std::int64_t width) {
    return BatchTensor(name, data, p.dtype, s, outer, seqlen, heads, width);
  };
  std::vector<TensorView> inputs = {view("q", p.q, p.q_strides, p.batch, p.seqlen_q, p.heads_q, p.head_dim),
                                    TensorView{"cache_seqlens", p.cache_seqlens, 4, {{"batch", p.batch, 1}}}};
  if (p.keys_after != nullptr) inputs.push_back(TensorView{"keys_after", p.keys_after, 4, {{"batch", p.batch, 1}}});
  if (p.seqlen_new > 0) {
    inputs.push_back(view("k_new", p.k_new, p.new_strides, p.batch, p.seqlen_new, p.heads_kv, p.head_dim));
    if (!p.values_in_keys()) {
      inputs.push_back(view("v_new", p.v_new, p.new_strides, p.batch, p.seqlen_new, p.heads_kv, dv));
    }
  }
  if (p.paged()) {
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
  if (p.sinks != nullptr) inputs.push_back(SinksView("sinks", p.sinks, p.heads_q));

  const std::int64_t cache_outer = p.paged() ? p.num_pages : p.batch;
  const std::int64_t cache_seq = p.paged() ? p.page_size : p.cache_seqlen_max;
  const std::int64_t cache_bytes = CacheElementBytes(p);
  // V inside the K cache is part of k_cache's rows (dv ≤ d, the same strides): checked, and written, as k_cache.
  std::vector<TensorView> caches = {
      BatchTensor("k_cache", p.k_cache, cache_bytes, p.cache_strides, cache_outer, cache_seq, p.heads_kv, p.head_dim)};
  if (!p.values_in_keys()) {
    caches.push_back(
        BatchTensor("v_cache", p.v_cache, cache_bytes, p.cache_strides, cache_outer, cache_seq, p.heads_kv, dv));
  }
  std::vector<TensorView> fixed_scales;  // read, never written
  if (quantized) {
    std::vector<std::pair<const char*, const float*>> scale_tensors = {{"k_scale", p.k_scale}};
    if (!p.values_in_keys()) scale_tensors.emplace_back("v_scale", p.v_scale);  // inside K, V's are k_scale
    for (const auto& [name, scales] : scale_tensors) {
      const TensorView view = ScaleView(name, scales, p.scale_granularity, p.scale_strides, cache_outer, cache_seq,
                                        p.heads_kv, scale_groups);
      (p.scale_granularity == ScaleGranularity::kPerToken ? caches : fixed_scales).push_back(view);
    }
  }
  std::vector<TensorView> outputs = {view("o", p.o, p.o_strides, p.batch, p.seqlen_q, p.heads_q, dv)};
  if (p.lse != nullptr) outputs.push_back(LseView("lse", p.lse, p.batch, p.heads_q, p.seqlen_q));
  // The caches (and per-token scales) are written when keys are appended; then they must not overlap
  // anything else either.
  std::vector<TensorView>& written_or_read = p.seqlen_new > 0 ? outputs : inputs;
  written_or_read.insert(written_or_read.end(), caches.begin(), caches.end());
  inputs.insert(inputs.end(), fixed_scales.begin(), fixed_scales.end());
  CheckOutputs(outputs, inputs);
  CheckSinkValues("sinks", p.sinks, p.heads_q);
  if (quantized && p.seqlen_new > 0) {
    CheckFinite("k_new", p.k_new, p.dtype, p.new_strides, p.batch, p.seqlen_new, p.heads_kv, p.head_dim);
    if (!p.values_in_keys()) {
      CheckFinite("v_new", p.v_new, p.dtype, p.new_strides, p.batch, p.seqlen_new, p.heads_kv, dv);
    }
    for (const TensorView& scales : fixed_scales) CheckFixedScales(scales);
  }

  // Now the index tensors may be read: lengths, capacity, rotary positions, table entries.
  std::vector<std::int64_t> appended_slots;  // page·page_size + slot of every appended key (paged)
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t cached = p.cache_seqlens[b];
    if (cached < 0) Fail("cache_seqlens[", b, "] must be >= 0, got ", cached);
    if (p.keys_after != nullptr && p.keys_after[b] < 0) Fail("keys_after[", b, "] must be >= 0, got ", p.keys_after[b]);
    std::int64_t Nk;
    const bool fits = MulAdd(1, cached, p.seqlen_new, &Nk);
    if (!fits || Nk > capacity) {
      Fail("cache_seqlens[", b, "] + seqlen_new = ", cached, " + ", p.seqlen_new, " = ",
           fits ? std::to_string(Nk) : std::string("more than int64 holds"),
           " exceeds the cache capacity of ", capacity, " keys",
           p.paged() ? " (max_pages·page_size)" : " (cache_seqlen_max)");
    }
    if (p.rotary_dim > 0) {
      // The queries' last position: cache_seqlens[b] + seqlen_q − 1, or cache_seqlens[b] for them all.
      const std::int64_t query_rows =
          p.rotary_queries_at_cache_end ? std::min<std::int64_t>(p.seqlen_q, 1) : p.seqlen_q;
      const std::int64_t last_pos = cached + std::max(p.seqlen_new, query_rows) - 1;
      if (last_pos >= p.rotary_max_pos) {
        Fail("rotary position ", last_pos, " of sequence ", b, " (cache_seqlens[", b, "]=", cached,
             ") is beyond the rotary tables' rotary_max_pos=", p.rotary_max_pos);
      }
    }
    if (!p.paged()) continue;
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

void validate(const QuantizeParams& p) {
  CheckDType("dtype", p.dtype);
  CheckQuantization("element", p.element, "granularity", p.granularity);
  if (!Quantized(p.element)) Fail("element must be int8, fp8_e4m3 or fp8_e5m2, got float");
  CheckSize("outer", p.outer, 0);
  CheckSize("seqlen", p.seqlen, 0);
  CheckSize("heads", p.heads, 1);
  CheckRange("head_dim", p.head_dim, 1, kMaxHeadDim);
  const std::int64_t groups = CheckGroupSize("group_size", p.group_size, p.granularity, p.head_dim);
  const TensorView x = BatchTensor("x", p.x, p.dtype, p.x_strides, p.outer, p.seqlen, p.heads, p.head_dim);
  const TensorView values = BatchTensor("values", p.values, 1, p.value_strides, p.outer, p.seqlen, p.heads, p.head_dim);
  const TensorView scales =
      ScaleView("scales", p.scales, p.granularity, p.scale_strides, p.outer, p.seqlen, p.heads, groups);
  CheckOutputs({values, scales}, {x});
  CheckFinite("x", p.x, p.dtype, p.x_strides, p.outer, p.seqlen, p.heads, p.head_dim);
}

// The forward call's tensors, o and lse included, are all read; the gradients are written.
void validate(const BackwardParams& p) {
  const AttentionParams& a = p.attention;
  CheckAttentionSizes(a);  // shapes, modifiers, dropout, as the forward pass saw them
  RequireLse("attention.lse", "backward", a.lse, a.batch, a.heads_q, a.seqlen_q);
  CallTensors t{AttentionTensors(a, kBackwardNames).AllRead(), {}};
  AddGradientTensors(p, kBackwardNames, &t);
  CheckOutputs(t.outputs, t.inputs);
  CheckSinkValues("attention.sinks", a.sinks, a.heads_q);
  CheckLseValues("attention.lse", a.lse, a.batch, a.heads_q, a.seqlen_q);
}

void validate(const VarlenBackwardParams& p) {
  const VarlenParams& f = p.forward;
  CallTensors t{VarlenTensors(f, kVarlenBackwardNames).AllRead(), {}};
  RequireLse("forward.lse", "backward_varlen", f.lse, 1, f.heads_q, f.total_q);
  AddGradientTensors(varlen::PackedProblem(p), kVarlenBackwardNames, &t);
  CheckOutputs(t.outputs, t.inputs);
  CheckSinkValues("forward.sinks", f.sinks, f.heads_q);
  CheckCuSeqlens(f);
  CheckLseValues("forward.lse", f.lse, 1, f.heads_q, f.total_q);
}

}  // namespace flashattn
