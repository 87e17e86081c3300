// The per-element-type entry points of the fused kernel; each dispatches once to the best target.
#ifndef FLASHATTN_KERNELS_FUSED_DISPATCH_H_
#define FLASHATTN_KERNELS_FUSED_DISPATCH_H_

#include "flashattn/flashattn.h"

namespace flashattn::kernels {

void FusedForwardF32(const AttentionParams& params);
void FusedForwardF16(const AttentionParams& params);
void FusedForwardBF16(const AttentionParams& params);

}  // namespace flashattn::kernels

#endif  // FLASHATTN_KERNELS_FUSED_DISPATCH_H_
