// The ring forward pass's float32 running state: one (O, LSE) per local row and query head, into which
// every step's partial result is merged by its log-sum-exp.
#ifndef FLASHATTN_DISTRIBUTED_RUNNING_STATE_H_
#define FLASHATTN_DISTRIBUTED_RUNNING_STATE_H_

#include <cstdint>
#include <vector>

#include "flashattn/flashattn.h"

namespace flashattn::distributed {

// Starts as the empty state O = 0, LSE = −∞ (no key seen) in every row.
class RunningState {
 public:
  RunningState(std::int64_t batch, std::int64_t rows, std::int64_t heads, std::int64_t dv);

  // Merges a partial for rows [row_begin, row_begin + rows): o (batch, rows, heads, dv), lse (batch, heads,
  // rows), by merge_attention_states' rule: LSE = log(e^{LSE_a} + e^{LSE_b}), O = Σ e^{LSE_k − LSE} O_k.
  // An empty partial (−∞) changes nothing; two empty states stay empty (no NaN); a NaN spreads to the row.
  void Merge(std::int64_t row_begin, std::int64_t rows, const float* o, const float* lse);

  // The state of row i, head h of batch entry b.
  const float* O(std::int64_t b, std::int64_t i, std::int64_t h) const {
    return o_.data() + ((b * rows_ + i) * heads_ + h) * dv_;
  }
  float Lse(std::int64_t b, std::int64_t i, std::int64_t h) const {
    return lse_[static_cast<std::size_t>((b * heads_ + h) * rows_ + i)];
  }

  // Merges each row's attention sink (one more partial, LSE = s_h and O = 0) once every block is in; null or
  // −∞: no sink, no change.
  void JoinSinks(const float* sinks);

  // Writes O rounded to the element type of `local` (through its strides) and, if requested, the LSE.
  void WriteTo(const AttentionParams& local) const;

 private:
  void MergeRow(float& state_lse, float* state_o, float partial_lse, const float* partial_o) const;

  std::int64_t batch_, rows_, heads_, dv_;
  std::vector<float> o_, lse_;
};

}  // namespace flashattn::distributed

#endif  // FLASHATTN_DISTRIBUTED_RUNNING_STATE_H_
