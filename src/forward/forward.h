// The fused forward kernel: FlashAttention-2 with SIMD micro-kernels, every mask, three element types,
// OpenMP threads. The design and its memory traffic are worked out in docs/fused_kernel.md; the loops are in
// forward-inl.h.
//
// This header holds no SIMD types: the kernel is compiled for every Highway target and one of them is
// chosen at run time, once per call (src/simd/dispatch.h).
#ifndef FLASHATTN_FORWARD_FORWARD_H_
#define FLASHATTN_FORWARD_FORWARD_H_

#include <cstdint>

#include "flashattn/flashattn.h"
#include "simd/dispatch.h"

namespace flashattn::forward_kernel {

// Block sizes of the fused kernel: Br query rows per Q block, Bc keys per K/V block.
struct FusedTiling {
  std::int64_t Br, Bc;
};

// The block sizes the kernel uses for `params`: params.tiling.block_rows/block_cols when non-zero,
// otherwise the rule of docs/fused_kernel.md derived from the detected per-core cache sizes, under a block
// mask aligned with its blocks (common/score.h, BlockAlignedTile).
FusedTiling ChooseFusedTiling(const AttentionParams& params);

// Whether a call packs float16/bfloat16 K and V as float32, once per head (its Q blocks of Br rows span more
// than one register tile of 6 rows: simd/register_tiles-inl.h, kMR), rather than in their own type. The IO
// model charges the packed elements by the same rule.
inline bool PacksKvWide(DType dtype, std::int64_t Br) { return dtype != DType::kF32 && Br > 6; }

// The kernel for one element type on the best target of this CPU (forward_f32.cc, ...).
void ForwardF32(const AttentionParams& params);
void ForwardF16(const AttentionParams& params);
void ForwardBF16(const AttentionParams& params);

// Computes O (and LSE) for already-validated params: one dispatch, by element type and SIMD target.
inline void Forward(const AttentionParams& params) {
  simd::CallForElementType<ForwardF32, ForwardF16, ForwardBF16>(params.dtype, params);
}

}  // namespace flashattn::forward_kernel

#endif  // FLASHATTN_FORWARD_FORWARD_H_
