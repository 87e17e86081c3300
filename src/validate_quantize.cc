// Quantized caches (validate_checks.h): their element types, scale granularities and groups, the scales'
// tensors and values, the finiteness of values to quantize; and quantize_kv's parameters.
#include <bit>
#include <cmath>
#include <cstdint>

#include "common/cache_element_traits.h"
#include "common/element.h"
#include "common/quantize.h"
#include "flashattn/decode.h"
#include "validate_checks.h"

namespace flashattn {
namespace validation {
namespace {

// Whether n elements hold an inf or a NaN: all exponent bits set. Tested on the raw bits a row at a time, a loop
// the compiler vectorizes, because quantize_kv's whole input passes through here first.
template <typename T, typename Bits>
bool HoldsNonFinite(const void* row, std::int64_t n, Bits exponent) {
  const auto* x = static_cast<const T*>(row);
  bool non_finite = false;
  for (std::int64_t e = 0; e < n; ++e) non_finite |= (std::bit_cast<Bits>(x[e]) & exponent) == exponent;
  return non_finite;
}

}  // namespace

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

void CheckFixedScales(const TensorView& scales) {
  const auto* values = static_cast<const float*>(scales.data);
  for (std::int64_t n = 0; n < scales.NumElements(); ++n) {
    if (!(values[n] > 0.0f) || !std::isfinite(values[n])) {
      Fail(scales.name, "[", n, "] must be finite and > 0 to quantize appended keys, got ", values[n]);
    }
  }
}

}  // namespace validation

void validate(const QuantizeParams& p) {
  using namespace validation;
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

}  // namespace flashattn
