// The fused forward kernel: FlashAttention-2 with SIMD micro-kernels, every mask, three element
// types, OpenMP threads. The design and its memory traffic are worked out in docs/fused_kernel.md.
//
// This header holds no SIMD types: the kernel is compiled for every Highway target and one of them is
// chosen at run time, once per call.
#ifndef FLASHATTN_KERNELS_FUSED_FORWARD_H_
#define FLASHATTN_KERNELS_FUSED_FORWARD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "flashattn/flashattn.h"

namespace flashattn::kernels {

// Block sizes of the fused kernel: Br query rows per Q block, Bc keys per K/V block.
struct FusedTiling {
  std::int64_t Br, Bc;
};

// The block sizes the kernel uses for `params`: params.tiling.block_rows/block_cols when non-zero,
// otherwise the rule of docs/fused_kernel.md derived from the detected per-core cache sizes.
FusedTiling ChooseFusedTiling(const AttentionParams& params);

// Whether a call packs float16/bfloat16 K and V as float32, once per head (its Q blocks of Br rows span more
// than one register tile of 6 rows: fused_forward-inl.h, kMR), rather than in their own type. The IO model
// charges the packed elements by the same rule.
inline bool PacksKvWide(DType dtype, std::int64_t Br) { return dtype != DType::kF32 && Br > 6; }

// Computes O (and LSE) for already-validated params. Dispatches once to the best SIMD target.
void FusedForward(const AttentionParams& params);

// Test hooks, in the spirit of Highway's test-all-targets mode: the targets compiled into the library
// that this CPU can run, as Highway target bits (call it before restricting: a restriction narrows it);
// the name of one; a restriction of every dispatch to one of them (0 restores the normal choice; a
// process-wide setting meant for tests); and the target the next call would run on.
std::vector<std::int64_t> FusedTargets();
std::string FusedTargetName(std::int64_t target);
void RestrictFusedTargetForTest(std::int64_t target);
std::int64_t FusedDispatchedTarget();

// y_i = e^{x_i} with the kernel's vector exp on the currently dispatched target (for the accuracy test).
void FusedExp(const float* x, float* y, std::size_t n);
// The same with the softmax's ExpOfNonPositive, which skips the overflow test (valid for x ≤ 88.37).
void FusedExpOfNonPositive(const float* x, float* y, std::size_t n);

}  // namespace flashattn::kernels

#endif  // FLASHATTN_KERNELS_FUSED_FORWARD_H_
