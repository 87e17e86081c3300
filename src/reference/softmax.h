// The softmax family of docs/algorithms.md (section 1), one file per step of the derivation:
//   softmax_naive.cc   — exp(x_i) / Σ exp(x_j); overflows for large logits
//   softmax_safe.cc    — 3 passes: max, Σ exp(x − max), divide
//   softmax_online.cc  — 2 passes: running (m, d), then write
//   softmax_blocked.cc — the (m, d) state as a commutative monoid; blocks merged in any order
#ifndef FLASHATTN_REFERENCE_SOFTMAX_H_
#define FLASHATTN_REFERENCE_SOFTMAX_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>

namespace flashattn::reference {

// y_i = e^{x_i} / Σ_j e^{x_j}. Overflows to inf/NaN once some x_i > ~88 in float32.
void SoftmaxNaive(std::span<const float> x, std::span<float> y);

// max(a, b), NaN if either is NaN. std::max(−∞, NaN) is −∞, which would take a row of NaN scores for a row
// without keys; a NaN score must make its row NaN.
template <typename T>
T MaxKeepingNaN(T a, T b) {
  return std::isnan(b) ? b : std::max(a, b);  // std::max(a, b) is a when a is NaN
}

struct SoftmaxState;

// m = max_j x_j;  d = Σ_j e^{x_j − m};  y_i = e^{x_i − m} / d. Returns (m, d).
// With a sink s (an attention sink: one more logit that has no output of its own), m = max(s, max_j x_j) and
// d gains e^{s − m}; s = −∞ is no sink.
SoftmaxState SoftmaxSafe(std::span<const float> x, std::span<float> y,
                         float sink = -std::numeric_limits<float>::infinity());

// Pass 1: m_i = max(m_{i−1}, x_i), d_i = d_{i−1}·e^{m_{i−1} − m_i} + e^{x_i − m_i}.
// Pass 2: y_i = e^{x_i − m_N} / d_N.
void SoftmaxOnline(std::span<const float> x, std::span<float> y);

// The online-softmax state (m, d) of a set of logits: their maximum m and d = Σ e^{x − m}.
// States form a commutative monoid (docs/algorithms.md, 1.4):
//   (m_a, d_a) ⊕ (m_b, d_b) = (m, d_a·e^{m_a − m} + d_b·e^{m_b − m}),  m = max(m_a, m_b),
// with identity (−∞, 0). A side whose maximum is −∞ gets scale factor 0, never e^{−∞ − (−∞)} = NaN.
struct SoftmaxState {
  float m = -std::numeric_limits<float>::infinity();
  float d = 0.0f;

  static SoftmaxState Identity() { return {}; }
  static SoftmaxState Combine(const SoftmaxState& a, const SoftmaxState& b);
  // The state of one block of logits, built with the online recurrence.
  static SoftmaxState Of(std::span<const float> block);
  // log Σ e^{x} = m + log d; −∞ for the empty state.
  float LogSumExp() const;
};

// e^{m_part − m_new}: the factor that rescales a partial sum taken relative to m_part so that it is
// relative to m_new ≥ m_part. A part that saw no logit (m_part = −∞) contributes 0; this also covers
// m_new = −∞, where the formula would give e^{−∞ − (−∞)} = NaN.
float RescaleFactor(float m_part, float m_new);

// Softmax computed as the ⊕-merge of the states of consecutive blocks of `block_size` logits, then
// y_i = e^{x_i − m} / d. Rows of all −∞ give y = 0 (an empty distribution), not NaN. block_size ≥ 1.
void SoftmaxBlocked(std::span<const float> x, std::span<float> y, std::int64_t block_size);

}  // namespace flashattn::reference

#endif  // FLASHATTN_REFERENCE_SOFTMAX_H_
