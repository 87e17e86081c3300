// The public entry points of backward.h: the backward pass (validate once, then hand the call to the chosen
// algorithm), its params' stride helpers, and the dropout mask the passes regenerate.
#include "flashattn/backward.h"

#include "backward/backward.h"
#include "common/checked.h"
#include "common/dropout.h"
#include "reference/backward.h"
#include "validate.h"

namespace flashattn {

void BackwardParams::SetContiguousStrides() {
  attention.SetContiguousStrides();
  do_strides = attention.o_strides, dq_strides = attention.q_strides;
  dk_strides = attention.k_strides, dv_strides = attention.v_strides;
}

void BackwardParams::SetHeadMajorStrides() {
  attention.SetHeadMajorStrides();
  do_strides = attention.o_strides, dq_strides = attention.q_strides;
  dk_strides = attention.k_strides, dv_strides = attention.v_strides;
}

void backward(const BackwardParams& params, BackwardAlgorithm algorithm) {
  Validate(params);
  switch (algorithm) {
    case BackwardAlgorithm::kStandard:
      return reference::StandardBackward(params);
    case BackwardAlgorithm::kFused:
      return backward_kernel::Backward(params);
    case BackwardAlgorithm::kOracle:
      return reference::OracleBackward(params);
  }
  Fail("algorithm has an unknown value ", static_cast<int>(algorithm));
}

void MaterializeDropoutMask(const AttentionParams& params, std::uint8_t* keep) {
  ValidateDropoutMask(params, keep);
  const Dropout dropout(params);
  const std::int64_t Hq = params.heads_q, Nq = params.seqlen_q, Nk = params.seqlen_k;
  for (std::int64_t b = 0; b < params.batch; ++b)
    for (std::int64_t h = 0; h < Hq; ++h)
      for (std::int64_t i = 0; i < Nq; ++i)
        for (std::int64_t j = 0; j < Nk; ++j)
          keep[((b * Hq + h) * Nq + i) * Nk + j] = !dropout.Active() || dropout.Keep(b, h, i, j);
}

}  // namespace flashattn
