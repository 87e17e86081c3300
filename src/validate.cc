// All validation of the public entry points lives here, so that the algorithms may assume valid input.
// Every check runs before any output is touched: a call that throws has written nothing.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/checked.h"
#include "flashattn/flashattn.h"
#include "validate.h"

namespace flashattn {
namespace {

void CheckSize(const char* name, std::int64_t value, std::int64_t min) {
  if (value < min) Fail(name, " must be >= ", min, ", got ", value);
}

void CheckRange(const char* name, std::int64_t value, std::int64_t min, std::int64_t max) {
  if (value < min || value > max) Fail(name, " must be in [", min, ", ", max, "], got ", value);
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
  if (tensor.data == nullptr) Fail(tensor.name, " is a null pointer but holds ", tensor.NumElements(),
                                   " elements");
  std::int64_t last = 0;  // offset of the furthest element, in elements
  for (const Dim& dim : tensor.dims) {
    if (!MulAdd(dim.size - 1, dim.stride, last, &last)) {
      Fail(tensor.name, " is too large to index in 64 bits (dimension '", dim.name, "' of size ",
           dim.size, " with stride ", dim.stride, ")");
    }
  }
  std::int64_t end_bytes;
  if (!MulAdd(last + 1, tensor.element_bytes, 0, &end_bytes)) {
    Fail(tensor.name, " is too large to index in 64 bits (", last + 1, " elements of ",
         tensor.element_bytes, " bytes)");
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

void Validate(const AttentionParams& p) {
  switch (p.dtype) {
    case DType::kF32: case DType::kF16: case DType::kBF16: break;
    default: Fail("dtype has an unknown value ", static_cast<int>(p.dtype));
  }
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
  CheckSize("window_left", p.window_left, -1);
  CheckSize("window_right", p.window_right, -1);
  if (!(p.softcap >= 0.0f) || !std::isfinite(p.softcap)) {
    Fail("softcap must be finite and >= 0 (0 disables it), got ", p.softcap);
  }
  if (p.scale && !std::isfinite(*p.scale)) Fail("scale must be finite, got ", *p.scale);
  CheckSize("alibi_batch_stride", p.alibi_batch_stride, 0);
  if (p.alibi_batch_stride != 0 && p.alibi_batch_stride < p.heads_q) {
    Fail("alibi_batch_stride must be 0 (slopes per head) or >= heads_q=", p.heads_q, ", got ",
         p.alibi_batch_stride);
  }
  CheckSize("num_threads", p.num_threads, 0);
  CheckSize("tiling.fast_memory_bytes", p.tiling.fast_memory_bytes, 0);
  CheckSize("tiling.block_rows", p.tiling.block_rows, 0);
  CheckSize("tiling.block_cols", p.tiling.block_cols, 0);
  if (p.tiling.fast_memory_bytes > 0 && p.tiling.fast_memory_bytes < 4 * 4 * p.head_dim) {
    Fail("tiling.fast_memory_bytes must hold at least one row of Q, K, V and O (", 4 * 4 * p.head_dim,
         " bytes at head_dim=", p.head_dim, "), got ", p.tiling.fast_memory_bytes);
  }

  const std::int64_t elem = static_cast<std::int64_t>(SizeOf(p.dtype));
  const std::int64_t dv = p.HeadDimV();
  auto view = [&](const char* name, const void* data, const Strides& s, std::int64_t seqlen,
                  std::int64_t heads, std::int64_t dim) {
    return TensorView{name, data, elem,
                      {{"batch", p.batch, s.batch}, {"seq", seqlen, s.seq}, {"head", heads, s.head},
                       {"dim", dim, 1}}};
  };
  std::vector<TensorView> inputs = {view("q", p.q, p.q_strides, p.seqlen_q, p.heads_q, p.head_dim),
                                    view("k", p.k, p.k_strides, p.seqlen_k, p.heads_kv, p.head_dim),
                                    view("v", p.v, p.v_strides, p.seqlen_k, p.heads_kv, dv)};
  if (p.alibi_slopes != nullptr) {
    const std::int64_t rows = p.alibi_batch_stride == 0 ? 1 : p.batch;
    inputs.push_back(TensorView{"alibi_slopes", p.alibi_slopes, 4,
                                {{"batch", rows, p.alibi_batch_stride}, {"head", p.heads_q, 1}}});
  }
  switch (p.mask.kind) {
    case MaskKind::kNone: break;
    case MaskKind::kBool: case MaskKind::kAdditive: {
      const std::int64_t mask_elem = p.mask.kind == MaskKind::kBool ? 1 : 4;
      TensorView mask{"mask", p.mask.data, mask_elem,
                      {{"batch", p.batch, p.mask.stride_batch}, {"head", p.heads_q, p.mask.stride_head},
                       {"row", p.seqlen_q, p.mask.stride_row}, {"col", p.seqlen_k, p.mask.stride_col}}};
      if (mask.NumElements() > 0 && mask.data == nullptr) Fail("mask.data is a null pointer but mask.kind is set");
      inputs.push_back(mask);
      break;
    }
    default: Fail("mask.kind has an unknown value ", static_cast<int>(p.mask.kind));
  }
  std::vector<TensorView> outputs = {view("o", p.o, p.o_strides, p.seqlen_q, p.heads_q, dv)};
  if (p.lse != nullptr) {
    std::int64_t lse_batch_stride;
    if (!MulAdd(p.heads_q, p.seqlen_q, 0, &lse_batch_stride)) {
      Fail("lse is too large to index in 64 bits (heads_q=", p.heads_q, " times seqlen_q=", p.seqlen_q, ")");
    }
    outputs.push_back(TensorView{"lse", p.lse, 4,
                                 {{"batch", p.batch, lse_batch_stride},
                                  {"head", p.heads_q, p.seqlen_q}, {"seq", p.seqlen_q, 1}}});
  }
  CheckOutputs(outputs, inputs);
}

}  // namespace flashattn
