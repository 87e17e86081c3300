// Tensor views (validate_checks.h): sizes, strides, 64-bit offsets and overlaps; the LSE and sink tensors.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "validate_checks.h"

namespace flashattn::validation {
namespace {

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

}  // namespace

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

TensorView LseView(const char* name, const float* lse, std::int64_t batch, std::int64_t heads,
                   std::int64_t seqlen) {
  std::int64_t batch_stride;
  if (!MulAdd(heads, seqlen, 0, &batch_stride)) {
    Fail(name, " is too large to index in 64 bits (heads_q=", heads, " times seqlen_q=", seqlen, ")");
  }
  return TensorView{
      name, lse, 4, {{"batch", batch, batch_stride}, {"head", heads, seqlen}, {"seq", seqlen, 1}}};
}

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

TensorView SinksView(const char* name, const float* sinks, std::int64_t heads_q) {
  return TensorView{name, sinks, 4, {{"head", heads_q, 1}}};
}

// NaN and +∞ are refused rather than propagated: a NaN sink would turn every row of its head into NaN, +∞
// every O into 0.
void CheckSinkValues(const char* name, const float* sinks, std::int64_t heads_q) {
  if (sinks == nullptr) return;
  for (std::int64_t h = 0; h < heads_q; ++h) {
    if (std::isnan(sinks[h]) || sinks[h] == std::numeric_limits<float>::infinity()) {
      Fail(name, " must be finite or -inf, got ", sinks[h], " at head ", h);
    }
  }
}

}  // namespace flashattn::validation
