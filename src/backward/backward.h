// The fused backward kernel: FlashAttention-2's backward on the CPU with SIMD micro-kernels and OpenMP
// threads, for already-validated params; the design is in backward-inl.h and docs/backward.md. This header
// holds no SIMD types: the kernel is compiled for every Highway target and one of them is chosen at run
// time, once per call (src/simd/dispatch.h).
#ifndef FLASHATTN_BACKWARD_BACKWARD_H_
#define FLASHATTN_BACKWARD_BACKWARD_H_

#include "flashattn/backward.h"
#include "simd/dispatch.h"

namespace flashattn::backward_kernel {

// The kernel for one element type on the best target of this CPU (backward_f32.cc, ...).
void BackwardF32(const BackwardParams& params);
void BackwardF16(const BackwardParams& params);
void BackwardBF16(const BackwardParams& params);

// Computes dQ, dK and dV: one dispatch, by element type and SIMD target.
inline void Backward(const BackwardParams& params) {
  simd::CallForElementType<BackwardF32, BackwardF16, BackwardBF16>(params.attention.dtype, params);
}

}  // namespace flashattn::backward_kernel

#endif  // FLASHATTN_BACKWARD_BACKWARD_H_
