#include "distributed/running_state.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "distributed/element_cast.h"
#include "flashattn/flashattn.h"

namespace flashattn::distributed {

RunningState::RunningState(std::int64_t batch, std::int64_t rows, std::int64_t heads, std::int64_t dv)
    : batch_(batch),
      rows_(rows),
      heads_(heads),
      dv_(dv),
      o_(static_cast<std::size_t>(batch * rows * heads * dv), 0.0f),
      lse_(static_cast<std::size_t>(batch * heads * rows), -std::numeric_limits<float>::infinity()) {}

void RunningState::Merge(std::int64_t row_begin, std::int64_t rows, const float* o, const float* lse) {
  for (std::int64_t b = 0; b < batch_; ++b)
    for (std::int64_t h = 0; h < heads_; ++h)
      for (std::int64_t i = 0; i < rows; ++i) {
        float& state_lse = lse_[static_cast<std::size_t>((b * heads_ + h) * rows_ + row_begin + i)];
        float* state_o = o_.data() + ((b * rows_ + row_begin + i) * heads_ + h) * dv_;
        MergeRow(state_lse, state_o, lse[(b * heads_ + h) * rows + i], o + ((b * rows + i) * heads_ + h) * dv_);
      }
}

void RunningState::MergeRow(float& state_lse, float* state_o, float partial_lse, const float* partial_o) const {
  if (std::isnan(partial_lse) || std::isnan(state_lse)) {
    state_lse = std::numeric_limits<float>::quiet_NaN();
    std::fill(state_o, state_o + dv_, state_lse);
    return;
  }
  const float m = std::max(state_lse, partial_lse);  // every weight e^{LSE_k − m} ≤ 1: no overflow
  if (m == -std::numeric_limits<float>::infinity()) return;
  const float state_weight = std::exp(state_lse - m), partial_weight = std::exp(partial_lse - m);
  const float sum = state_weight + partial_weight;
  state_lse = m + std::log(sum);
  const float keep = state_weight / sum, add = partial_weight / sum;
  for (std::int64_t e = 0; e < dv_; ++e) state_o[e] = keep * state_o[e] + add * partial_o[e];
}

void RunningState::JoinSinks(const float* sinks) {
  if (sinks == nullptr) return;
  const std::vector<float> no_value(static_cast<std::size_t>(dv_), 0.0f);
  for (std::int64_t b = 0; b < batch_; ++b)
    for (std::int64_t h = 0; h < heads_; ++h) {
      if (sinks[h] == -std::numeric_limits<float>::infinity()) continue;
      for (std::int64_t i = 0; i < rows_; ++i) {
        MergeRow(lse_[static_cast<std::size_t>((b * heads_ + h) * rows_ + i)], o_.data() + ((b * rows_ + i) * heads_ + h) * dv_,
                 sinks[h], no_value.data());
      }
    }
}

void RunningState::WriteTo(const AttentionParams& local) const {
  NarrowInto(o_.data(), local.dtype, local.o_strides, batch_, rows_, heads_, dv_, local.o);
  if (local.lse != nullptr) std::copy(lse_.begin(), lse_.end(), local.lse);
}

}  // namespace flashattn::distributed
