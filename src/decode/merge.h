// The LSE merge of docs/algorithms.md, one query row at a time. Both merge_attention_states and the split-KV path of
// decode() call MergeRow, so the public operation is the one the kernel uses.
#ifndef FLASHATTN_DECODE_MERGE_H_
#define FLASHATTN_DECODE_MERGE_H_

#include <cstdint>
#include <limits>

namespace flashattn::decode_kernel {

// Merges n partial results of one query row over disjoint key sets, and the row's attention sink s (−∞: none):
//   partial k: O_k = o_partials[k·o_stride + e] (e < dv), LSE_k = lse_partials[k·lse_stride]
//   LSE = m + log(Σ_k e^{LSE_k − m} + e^{s − m}) with m = max(s, max_k LSE_k),   O = Σ_k e^{LSE_k − LSE} O_k
// The sink is one more partial with LSE = s and O = 0: it joins the row once, here, however many chunks the
// keys were split into. Writes O to `o` (dv floats) and returns LSE. Partials with LSE_k = −∞ get weight 0;
// when every LSE_k and s are −∞ (or n = 0 without a sink) O = 0 and the result is −∞.
float MergeRow(std::int64_t n, const float* o_partials, std::int64_t o_stride, const float* lse_partials,
               std::int64_t lse_stride, std::int64_t dv, float* o, float sink = -std::numeric_limits<float>::infinity());

}  // namespace flashattn::decode_kernel

#endif  // FLASHATTN_DECODE_MERGE_H_
