// The gradients of attention by recomputation.
//
// Given the forward pass's inputs Q, K, V, its output O and log-sum-exp LSE, and the gradient dO of a loss
// with respect to O, computes
//   D = rowsum(dO ∘ O),  P = exp(S − LSE),  dV = Pᵀ dO,  dP = dO Vᵀ,  dS = P ∘ (dP − D),
//   dQ = s·dS K,  dK = s·dSᵀ Q
// with the chain rule through softcap's tanh, no gradient for ALiBi or the mask tensor, and dK, dV summed
// over the query heads that share a K/V head; with attention sinks also dsinks_h = −Σ_{b,i} e^{s_h − LSE_i}·D_i.
// Nothing of size Nq×Nk is stored: P is recomputed tile by tile,
// and dropout masks are regenerated from the counter-based generator the forward pass used. docs/backward.md
// derives each step.
#ifndef FLASHATTN_BACKWARD_H_
#define FLASHATTN_BACKWARD_H_

#include <cstdint>

#include "flashattn/export.h"
#include "flashattn/forward.h"
#include "flashattn/types.h"
#include "flashattn/varlen.h"

namespace flashattn {

// The forward call's parameters (`attention`, with the same q, k, v, shapes, masks, modifiers and dropout
// fields; o and lse are read, never written, and lse is required), the incoming gradient dO (batch, Nq,
// Hq, dv) and the gradients to write: dQ (batch, Nq, Hq, d), dK (batch, Nk, Hkv, d), dV (batch, Nk, Hkv, dv).
// All of dO, dQ, dK, dV have the element type `attention.dtype` and are addressed through their own strides.
struct BackwardParams {
  AttentionParams attention;
  const void* d_o = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  Strides do_strides, dq_strides, dk_strides, dv_strides;
  // The gradient of the attention sinks, float32 (Hq), overwritten (as flash-attn does with its gradients):
  // dsinks[h] = ∂L/∂s_h = −Σ_{b,i} e^{s_h − LSE_{b,h,i}}·D_{b,h,i}, D = rowsum(dO ∘ O) (docs/backward.md).
  // Optional when attention.sinks is set (null = not computed); must be null when it is not.
  float* dsinks = nullptr;

  // Sets every stride (attention's too) for contiguous (batch, seq, head, dim) tensors.
  FLASHATTN_API void set_contiguous_strides();
  // Sets every stride (attention's too) for contiguous (batch, head, seq, dim) tensors.
  FLASHATTN_API void set_head_major_strides();
};

enum class BackwardAlgorithm : std::uint8_t {
  kStandard,  // float32, materializes P and dS (Nq×Nk per head) in the element type: the plain baseline
  kFused,     // the fast kernel: K/V blocks in parallel, P recomputed per tile, deterministic (the default)
  kOracle,    // float64 from Q, K, V and dO alone (O and LSE recomputed exactly), rounded once
};

// Checks `params` and throws Error describing the first problem found; called by backward() before any
// gradient is written.
FLASHATTN_API void validate(const BackwardParams& params);

// Writes dQ, dK and dV. Repeated calls with the same inputs and thread count give bitwise identical results.
FLASHATTN_API void backward(const BackwardParams& params, BackwardAlgorithm algorithm = BackwardAlgorithm::kFused);

// The gradients of forward_varlen (flash-attn's varlen backward). `forward` is the forward_varlen call's
// parameters (o and lse are read; lse is required). dO is packed like o (total_q, Hq, dv), dQ like q
// (total_q, Hq, d), dK like k and dV like v (total_k, Hkv, d or dv), each with its own row and head strides
// (0 = contiguous), in the element type `forward.dtype`. Each sequence is differentiated as backward()
// differentiates its batch-1 problem, so each keeps its own causal alignment and dropout stream; every
// gradient row of a sequence is written by that sequence alone (dK, dV of a sequence with no query are zero).
struct VarlenBackwardParams {
  VarlenParams forward;
  const void* d_o = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  std::int64_t do_row_stride = 0, do_head_stride = 0;
  std::int64_t dq_row_stride = 0, dq_head_stride = 0;
  std::int64_t dk_row_stride = 0, dk_head_stride = 0;
  std::int64_t dv_row_stride = 0, dv_head_stride = 0;
  // As BackwardParams::dsinks, summed over every sequence's rows.
  float* dsinks = nullptr;
};

FLASHATTN_API void validate(const VarlenBackwardParams& params);
FLASHATTN_API void backward_varlen(const VarlenBackwardParams& params,
                                   BackwardAlgorithm algorithm = BackwardAlgorithm::kFused);

}  // namespace flashattn

#endif  // FLASHATTN_BACKWARD_H_
