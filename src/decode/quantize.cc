// quantize_kv: float K or V values into a quantized cache and its scales, a vector at a time
// (simd/quantize-inl.h), compiled for every Highway target; one translation unit for the three input types.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "decode/quantize.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/element.h"
#include "common/quantize.h"
#include "decode/decode.h"
#include "flashattn/decode.h"
#include "simd/quantize-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE {
namespace {

template <typename T>
void QuantizeKvT(const QuantizeParams& p) {
  const std::int64_t d = p.head_dim;
  const Strides scale_strides = ScaleStridesOf(p.granularity, p.scale_strides);
  const auto* x = static_cast<const T*>(p.x);
  const auto for_each_row = [&](const auto& visit) {
    for (std::int64_t o = 0; o < p.outer; ++o)
      for (std::int64_t s = 0; s < p.seqlen; ++s)
        for (std::int64_t h = 0; h < p.heads; ++h) {
          visit(o, s, h, x + o * p.x_strides.batch + s * p.x_strides.seq + h * p.x_strides.head);
        }
  };
  // A fixed scale covers a head or the tensor: max|x| over it / qmax, before any value is encoded.
  if (p.granularity != ScaleGranularity::kPerToken) {
    const std::int64_t count = p.granularity == ScaleGranularity::kPerHead ? p.heads : 1;
    std::vector<float> max_abs(static_cast<std::size_t>(count), 0.0f);
    for_each_row([&](std::int64_t, std::int64_t, std::int64_t h, const T* row) {
      float& m = max_abs[h * scale_strides.head];
      m = std::max(m, MaxAbs(row, d));
    });
    for (std::int64_t n = 0; n < count; ++n) p.scales[n] = max_abs[n] / QuantMax(p.element);
  }
  for_each_row([&](std::int64_t o, std::int64_t s, std::int64_t h, const T* row) {
    float* scales = p.scales + o * scale_strides.batch + s * scale_strides.seq + h * scale_strides.head;
    auto* values = static_cast<std::uint8_t*>(p.values) + o * p.value_strides.batch + s * p.value_strides.seq +
                   h * p.value_strides.head;
    QuantizeRowOf(row, d, p.element, p.granularity, p.group_size, scales, values);
  });
}

}  // namespace

void QuantizeKvF32(const QuantizeParams& p) { QuantizeKvT<float>(p); }
void QuantizeKvF16(const QuantizeParams& p) { QuantizeKvT<hwy::float16_t>(p); }
void QuantizeKvBF16(const QuantizeParams& p) { QuantizeKvT<hwy::bfloat16_t>(p); }

}  // namespace flashattn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashattn {

HWY_EXPORT(QuantizeKvF32);
HWY_EXPORT(QuantizeKvF16);
HWY_EXPORT(QuantizeKvBF16);
void decode_kernel::QuantizeKvF32(const QuantizeParams& p) { HWY_DYNAMIC_DISPATCH(QuantizeKvF32)(p); }
void decode_kernel::QuantizeKvF16(const QuantizeParams& p) { HWY_DYNAMIC_DISPATCH(QuantizeKvF16)(p); }
void decode_kernel::QuantizeKvBF16(const QuantizeParams& p) { HWY_DYNAMIC_DISPATCH(QuantizeKvBF16)(p); }

void QuantizeParams::set_contiguous_strides() {
  const std::int64_t d = head_dim, groups = group_size > 0 ? d / group_size : 1;
  x_strides = {seqlen * heads * d, heads * d, d};
  value_strides = x_strides;
  scale_strides = {seqlen * heads * groups, heads * groups, groups};
}

void quantize_kv(const QuantizeParams& p) {
  validate(p);
  simd::CallForElementType<decode_kernel::QuantizeKvF32, decode_kernel::QuantizeKvF16,
                           decode_kernel::QuantizeKvBF16>(p.dtype, p);
}

}  // namespace flashattn
#endif
