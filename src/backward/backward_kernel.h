// The fast backward kernel (issue 5): FlashAttention-2's backward on the CPU with Highway micro-kernels and
// OpenMP threads, for already-validated params. The design is in backward_kernel-inl.h. This header holds
// no SIMD types: each element type dispatches once to the best compiled target.
#ifndef FLASHATTN_BACKWARD_BACKWARD_KERNEL_H_
#define FLASHATTN_BACKWARD_BACKWARD_KERNEL_H_

#include "flashattn/backward.h"

namespace flashattn::backward_kernel {

void FusedBackwardF32(const BackwardParams& params);
void FusedBackwardF16(const BackwardParams& params);
void FusedBackwardBF16(const BackwardParams& params);

inline void FusedBackward(const BackwardParams& params) {
  switch (params.attention.dtype) {
    case DType::kF32:
      return FusedBackwardF32(params);
    case DType::kF16:
      return FusedBackwardF16(params);
    case DType::kBF16:
      return FusedBackwardBF16(params);
  }
}

}  // namespace flashattn::backward_kernel

#endif  // FLASHATTN_BACKWARD_BACKWARD_KERNEL_H_
