// merge_attention_states and the row merge it shares with decode().
#include "decode/merge.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/constants.h"
#include "common/element.h"
#include "flashattn/merge.h"

namespace flashattn {
namespace decode_kernel {

float MergeRow(std::int64_t n, const float* o_partials, std::int64_t o_stride, const float* lse_partials,
               std::int64_t lse_stride, std::int64_t dv, float* o, float sink) {
  float m = sink;  // max(s, max_k LSE_k): every weight e^{LSE_k − m} is ≤ 1, so the sum cannot overflow
  for (std::int64_t k = 0; k < n; ++k) {
    const float lse_k = lse_partials[k * lse_stride];
    if (std::isnan(lse_k)) {  // a partial that met a NaN: the merged row is NaN too (std::max would drop it)
      std::fill(o, o + dv, lse_k);
      return lse_k;
    }
    m = std::max(m, lse_k);
  }
  std::fill(o, o + dv, 0.0f);
  if (m == kNegInf) return kNegInf;
  float sum = 0.0f;  // Σ_k e^{LSE_k − m}
  for (std::int64_t k = 0; k < n; ++k) sum += std::exp(lse_partials[k * lse_stride] - m);
  if (sink != kNegInf) sum += std::exp(sink - m);  // the sink's weight; its O is 0
  const float lse = m + std::log(sum);
  for (std::int64_t k = 0; k < n; ++k) {
    const float lse_k = lse_partials[k * lse_stride];
    if (lse_k == kNegInf) continue;
    const float weight = std::exp(lse_k - m) / sum;  // e^{LSE_k − LSE}
    const float* O_k = o_partials + k * o_stride;
    for (std::int64_t e = 0; e < dv; ++e) o[e] += weight * O_k[e];
  }
  return lse;
}

}  // namespace decode_kernel

void MergeParams::set_contiguous_strides() {
  o_strides = {seqlen * heads * head_dim_v, heads * head_dim_v, head_dim_v};
}

void merge_attention_states(const MergeParams& p) {
  validate(p);
  const std::int64_t dv = p.head_dim_v;
  // Partial k of row (b, i, h): O at ((k·batch + b)·seqlen + i)·heads + h rows of dv, LSE at
  // ((k·batch + b)·heads + h)·seqlen + i.
  const std::int64_t o_partial_stride = p.batch * p.seqlen * p.heads * dv;
  const std::int64_t lse_partial_stride = p.batch * p.heads * p.seqlen;
  std::vector<float> o_row(static_cast<std::size_t>(dv));
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t i = 0; i < p.seqlen; ++i)
      for (std::int64_t h = 0; h < p.heads; ++h) {
        const std::int64_t lse_index = (b * p.heads + h) * p.seqlen + i;
        // This row in partial 0. Without partials both pointers may be null (offsetting null is undefined).
        const bool has_partials = p.num_partials > 0;
        const std::int64_t o_partial_index = ((b * p.seqlen + i) * p.heads + h) * dv;
        const float* o_partial = has_partials ? p.o_partials + o_partial_index : nullptr;
        const float* lse_partial = has_partials ? p.lse_partials + lse_index : nullptr;
        const float sink = p.sinks == nullptr ? kNegInf : p.sinks[h];
        const float lse = decode_kernel::MergeRow(p.num_partials, o_partial, o_partial_stride, lse_partial,
                                                  lse_partial_stride, dv, o_row.data(), sink);
        const std::int64_t o_index = b * p.o_strides.batch + i * p.o_strides.seq + h * p.o_strides.head;
        for (std::int64_t e = 0; e < dv; ++e) StoreFromFloat(p.o, p.dtype, o_index + e, o_row[e]);
        if (p.lse != nullptr) p.lse[lse_index] = lse;
      }
}

}  // namespace flashattn
