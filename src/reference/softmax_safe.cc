// Step 2 of the softmax derivation (docs/algorithms.md): subtracting the maximum keeps every exponent ≤ 0, at the cost
// of three passes.
#include <algorithm>
#include <cmath>

#include "reference/softmax.h"

namespace flashattn::reference {

SoftmaxState SoftmaxSafe(std::span<const float> x, std::span<float> y, float sink) {
  float m = sink;  // pass 1: m = max(s, max_j x_j) (NaN if some x_j is)
  for (float x_j : x) m = MaxKeepingNaN(m, x_j);
  if (m == -std::numeric_limits<float>::infinity()) {  // every logit masked: empty distribution
    std::fill(y.begin(), y.end(), 0.0f);
    return SoftmaxState::Identity();
  }
  float d = 0.0f;  // pass 2: d = Σ_j e^{x_j − m}
  for (float x_j : x) d += std::exp(x_j - m);
  if (sink != -std::numeric_limits<float>::infinity()) d += std::exp(sink - m);  // the sink's term, no y of its own
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = std::exp(x[i] - m) / d;  // pass 3
  return {m, d};
}

}  // namespace flashattn::reference
