// The reference backward passes (src/reference/backward.cc): readable, per (batch, K/V head), each line
// one formula of docs/backward.md. They take validated params (flashattn::backward validates).
#ifndef FLASHATTN_REFERENCE_BACKWARD_H_
#define FLASHATTN_REFERENCE_BACKWARD_H_

#include <cstdint>
#include <vector>

#include "flashattn/backward.h"

namespace flashattn::reference {

// float32, P and dS materialized (Nq×Nk per head) in the element type.
void StandardBackward(const BackwardParams& params);
// float64 from Q, K, V and dO; gradients rounded once to the element type.
void OracleBackward(const BackwardParams& params);

// The float64 gradients of one (batch b, K/V head hkv): dQ of its group's query heads (group × Nq × d, the
// group's first head first), dK (Nk × d) and dV (Nk × dv), each summed over the group, and each query head's
// share of dsinks (group; 0 without sinks).
struct OracleGradients {
  std::vector<double> dQ, dK, dV, dsinks;
};
OracleGradients OracleBackwardGroup(const BackwardParams& params, std::int64_t b, std::int64_t hkv);

// ⟨dO, O⟩ = Σ dO ∘ O with O from the float64 oracle: the loss whose gradients the backward pass computes
// (for checking the oracle's gradients by finite differences).
double OracleLoss(const BackwardParams& params);

}  // namespace flashattn::reference

#endif  // FLASHATTN_REFERENCE_BACKWARD_H_
