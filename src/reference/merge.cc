// The merge of attention states (docs/algorithms.md), readable and in float64. An attention state of one query row
// over a set of keys is its normalized output O and LSE = log Σ_j e^{S_j}; two states over disjoint key sets
// combine as
//   LSE = log(e^{LSE_a} + e^{LSE_b}) = m + log(e^{LSE_a − m} + e^{LSE_b − m}),  m = max(LSE_a, LSE_b)
//   O   = e^{LSE_a − LSE} O_a + e^{LSE_b − LSE} O_b
// This is the (m, d) monoid of §2.4 lifted to rows; the identity is (O = 0, LSE = −∞).
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/constants.h"
#include "common/element.h"
#include "reference/reference.h"
#include "reference/softmax.h"

namespace flashattn::reference {

AttentionState MergeStates(const AttentionState& a, const AttentionState& b) {
  constexpr double kNegInf = kNegInfOf<double>;
  const double m = MaxKeepingNaN(a.lse, b.lse);  // a NaN state (a NaN score) makes the merge NaN
  AttentionState merged{std::vector<double>(a.O.size(), 0.0), kNegInf};
  if (m == kNegInf) return merged;  // both empty: never e^{−∞ − (−∞)}
  const double w_a = a.lse == kNegInf ? 0.0 : std::exp(a.lse - m);
  const double w_b = b.lse == kNegInf ? 0.0 : std::exp(b.lse - m);
  merged.lse = m + std::log(w_a + w_b);
  for (std::size_t e = 0; e < merged.O.size(); ++e) merged.O[e] = (w_a * a.O[e] + w_b * b.O[e]) / (w_a + w_b);
  return merged;
}

void MergeAttentionStates(const MergeParams& p) {
  const std::int64_t dv = p.head_dim_v, rows = p.batch * p.seqlen * p.heads;
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t i = 0; i < p.seqlen; ++i)
      for (std::int64_t h = 0; h < p.heads; ++h) {
        const std::int64_t o_row = (b * p.seqlen + i) * p.heads + h, lse_row = (b * p.heads + h) * p.seqlen + i;
        AttentionState state{std::vector<double>(dv, 0.0), kNegInfOf<double>};
        for (std::int64_t k = 0; k < p.num_partials; ++k) {  // left fold: ((s_0 ⊕ s_1) ⊕ s_2) ⊕ ...
          const float* O_k = p.o_partials + (k * rows + o_row) * dv;
          state = MergeStates(state, {std::vector<double>(O_k, O_k + dv), p.lse_partials[k * rows + lse_row]});
        }
        const std::int64_t o_index = b * p.o_strides.batch + i * p.o_strides.seq + h * p.o_strides.head;
        for (std::int64_t e = 0; e < dv; ++e) {
          StoreFromFloat(p.o, p.dtype, o_index + e, static_cast<float>(state.O[e]));
        }
        if (p.lse != nullptr) p.lse[lse_row] = static_cast<float>(state.lse);
      }
}

}  // namespace flashattn::reference
