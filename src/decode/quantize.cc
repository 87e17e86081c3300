// quantize_kv: float K or V values into a quantized cache and its scales (common/quantize.h's rows).
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/element.h"
#include "common/quantize.h"
#include "flashattn/decode.h"

namespace flashattn {

void QuantizeParams::set_contiguous_strides() {
  const std::int64_t d = head_dim, groups = group_size > 0 ? d / group_size : 1;
  x_strides = {seqlen * heads * d, heads * d, d};
  value_strides = x_strides;
  scale_strides = {seqlen * heads * groups, heads * groups, groups};
}

void quantize_kv(const QuantizeParams& p) {
  validate(p);
  const std::int64_t d = p.head_dim;
  const Strides scale_strides = ScaleStridesOf(p.granularity, p.scale_strides);
  std::vector<float> row(static_cast<std::size_t>(d));
  const auto for_each_row = [&](const auto& visit) {
    for (std::int64_t o = 0; o < p.outer; ++o)
      for (std::int64_t s = 0; s < p.seqlen; ++s)
        for (std::int64_t h = 0; h < p.heads; ++h) {
          const std::int64_t x_row = o * p.x_strides.batch + s * p.x_strides.seq + h * p.x_strides.head;
          for (std::int64_t e = 0; e < d; ++e) row[e] = LoadAsFloat(p.x, p.dtype, x_row + e);
          visit(o, s, h);
        }
  };
  // A fixed scale covers a head or the tensor: max|x| over it / qmax, before any value is encoded.
  if (p.granularity != ScaleGranularity::kPerToken) {
    const std::int64_t count = p.granularity == ScaleGranularity::kPerHead ? p.heads : 1;
    std::vector<float> max_abs(static_cast<std::size_t>(count), 0.0f);
    for_each_row([&](std::int64_t, std::int64_t, std::int64_t h) {
      float& m = max_abs[h * scale_strides.head];
      for (float x : row) m = std::max(m, std::fabs(x));
    });
    for (std::int64_t n = 0; n < count; ++n) p.scales[n] = max_abs[n] / QuantMax(p.element);
  }
  for_each_row([&](std::int64_t o, std::int64_t s, std::int64_t h) {
    float* scales = p.scales + o * scale_strides.batch + s * scale_strides.seq + h * scale_strides.head;
    auto* values = static_cast<std::uint8_t*>(p.values) + o * p.value_strides.batch + s * p.value_strides.seq +
                   h * p.value_strides.head;
    QuantizeRow(row.data(), d, p.element, p.granularity, p.group_size, scales, values);
  });
}

}  // namespace flashattn
