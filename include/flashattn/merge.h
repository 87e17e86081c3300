// merge_attention_states: partial attention results over disjoint key sets, merged by their log-sum-exps:
//   LSE = log Σ_k e^{LSE_k},   O = Σ_k e^{LSE_k − LSE} O_k
// A partial with LSE_k = −∞ (it saw no key) contributes nothing; if every partial is −∞ the result is O = 0
// and LSE = −∞. LSEs are natural logarithms, as forward() writes them. It is the merge of blocked softmax
// states (docs/algorithms.md). With attention sinks, head h's sink s_h joins every row once, as one more
// partial with LSE = s_h and O = 0: LSE = log(Σ_k e^{LSE_k} + e^{s_h}), as decode() joins it after
// merging its chunks.
#ifndef FLASHATTN_MERGE_H_
#define FLASHATTN_MERGE_H_

#include <cstdint>

#include "flashattn/export.h"
#include "flashattn/types.h"

namespace flashattn {

// Layout (flash-attn's, with the partial index in front):
//   o_partials   float32 (num_partials, batch, seqlen, heads, dv), contiguous
//   lse_partials float32 (num_partials, batch, heads, seqlen), contiguous
//   o            (batch, seqlen, heads, dv) of `dtype`, addressed through o_strides
//   lse          optional float32 (batch, heads, seqlen), contiguous
struct MergeParams {
  const float* o_partials = nullptr;
  const float* lse_partials = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  Strides o_strides;

  std::int64_t num_partials = 0;
  std::int64_t batch = 1;
  std::int64_t seqlen = 0;
  std::int64_t heads = 1;
  std::int64_t head_dim_v = 0;  // dv
  DType dtype = DType::kF32;    // element type of o
  // Optional float32 (heads): one sink logit per head, each finite or −∞ (no sink, bitwise); null = none.
  const float* sinks = nullptr;

  // Fills o_strides for a contiguous (batch, seqlen, heads, dv) output.
  FLASHATTN_API void set_contiguous_strides();
};

// Checks `params`, every partial LSE included, and throws Error describing the first problem found.
FLASHATTN_API void validate(const MergeParams& params);
FLASHATTN_API void merge_attention_states(const MergeParams& params);

}  // namespace flashattn

#endif  // FLASHATTN_MERGE_H_
