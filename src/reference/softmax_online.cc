// Step 3 of the softmax derivation (docs/algorithms.md): the maximum and the sum are found in one pass by rescaling the
// running sum whenever the running maximum grows.
#include <algorithm>
#include <cmath>

#include "reference/softmax.h"

namespace flashattn::reference {

void SoftmaxOnline(std::span<const float> x, std::span<float> y) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  float m = neg_inf;
  float d = 0.0f;
  for (float x_i : x) {  // m_i = max(m_{i−1}, x_i);  d_i = d_{i−1}·e^{m_{i−1} − m_i} + e^{x_i − m_i}
    const float m_new = MaxKeepingNaN(m, x_i);  // a NaN logit makes the row NaN, even after −∞
    if (m_new == neg_inf) continue;  // still nothing but −∞: the state stays (−∞, 0)
    d = d * std::exp(m - m_new) + std::exp(x_i - m_new);
    m = m_new;
  }
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = d == 0.0f ? 0.0f : std::exp(x[i] - m) / d;
}

}  // namespace flashattn::reference
