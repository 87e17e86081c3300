// Row operations of the baselines, vectorized with Highway, over one row of scores whose first `visible`
// entries take part (a causal row's prefix): the safe softmax (docs/algorithms.md: max, then Σ exp(x − max), then
// divide) and the backward pass's P = exp(S − LSE).
#ifndef FLASHATTN_BENCH_BASELINE_SOFTMAX_H_
#define FLASHATTN_BENCH_BASELINE_SOFTMAX_H_

#include <cstdint>

namespace flashattn::bench {

// row[j] ← exp(row[j] − m) / l for j < visible, with m = max and l = Σ exp(row[j] − m) over j < visible;
// row[j] ← 0 for visible ≤ j < n. Returns LSE = m + log l, or −inf when visible = 0 (then the row is all 0).
// Accuracy: that of hwy::Exp (≤ 1 ulp) plus the rounding of the sum.
float SafeSoftmaxRow(float* row, std::int64_t visible, std::int64_t n);

// The backward baseline's recomputation P_j = exp(S_j − LSE) for j < visible, P_j = 0 for visible ≤ j < n,
// and P = 0 everywhere when shift = LSE = −inf (a row that saw no key).
void ExpShiftedRow(float* row, std::int64_t visible, std::int64_t n, float shift);

}  // namespace flashattn::bench

#endif  // FLASHATTN_BENCH_BASELINE_SOFTMAX_H_
