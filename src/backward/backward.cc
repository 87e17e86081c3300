// The public entry point of the backward pass: validate once, then hand the call to the chosen algorithm.
#include "flashattn/backward.h"

#include "backward/backward_kernel.h"
#include "common/checked.h"
#include "reference/backward.h"

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
      return backward_kernel::FusedBackward(params);
    case BackwardAlgorithm::kOracle:
      return reference::OracleBackward(params);
  }
  Fail("algorithm has an unknown value ", static_cast<int>(algorithm));
}

}  // namespace flashattn
