// Step 4 of the softmax derivation (docs/algorithms.md): the online state is a monoid, so blocks can be reduced
// independently (in parallel, in any order) and merged. This is the property FlashAttention's tiles rely on.
#include <algorithm>
#include <cmath>

#include "reference/softmax.h"

namespace flashattn::reference {

float RescaleFactor(float m_part, float m_new) {
  return m_part == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp(m_part - m_new);
}

SoftmaxState SoftmaxState::Combine(const SoftmaxState& a, const SoftmaxState& b) {
  const float m = MaxKeepingNaN(a.m, b.m);  // a NaN side makes the merge NaN, even against the identity
  if (m == -std::numeric_limits<float>::infinity()) return Identity();
  return {m, a.d * RescaleFactor(a.m, m) + b.d * RescaleFactor(b.m, m)};
}

float SoftmaxState::LogSumExp() const {
  return d == 0.0f ? -std::numeric_limits<float>::infinity() : m + std::log(d);
}

SoftmaxState SoftmaxState::Of(std::span<const float> block) {
  SoftmaxState state = Identity();
  for (float x_i : block) state = Combine(state, SoftmaxState{x_i, 1.0f});  // the state of one logit
  return state;
}

void SoftmaxBlocked(std::span<const float> x, std::span<float> y, std::int64_t block_size) {
  SoftmaxState total = SoftmaxState::Identity();
  for (std::size_t start = 0; start < x.size(); start += static_cast<std::size_t>(block_size)) {
    const std::size_t length = std::min(x.size() - start, static_cast<std::size_t>(block_size));
    total = SoftmaxState::Combine(total, SoftmaxState::Of(x.subspan(start, length)));
  }
  for (std::size_t i = 0; i < x.size(); ++i)
    y[i] = total.d == 0.0f ? 0.0f : std::exp(x[i] - total.m) / total.d;
}

}  // namespace flashattn::reference
