// The fused backward kernel: FlashAttention-2's backward on the CPU with SIMD micro-kernels and OpenMP
// threads, for already-validated params; the design is in backward-inl.h and docs/backward.md. This header
// holds no SIMD types: the kernel is compiled for every Highway target and one of them is chosen at run
// time, once per call (src/simd/dispatch.h).
#ifndef FLASHATTN_BACKWARD_BACKWARD_H_
#define FLASHATTN_BACKWARD_BACKWARD_H_

#include <algorithm>
#include <cstdint>

#include "common/score.h"
#include "flashattn/backward.h"
#include "simd/dispatch.h"

namespace flashattn::backward_kernel {

// Block sizes of the backward kernel: Br query rows per Q block, Bc keys per K/V block.
struct BackwardBlocks {
  std::int64_t Br, Bc;
};

// The caller's tiling if set, else 64×64 at d = 128 (the kernel's working set then stays within a 512 KiB
// L2), more rows for small heads and fewer for large ones; under a block mask aligned with its blocks
// (BlockAlignedTile).
inline BackwardBlocks ChooseBackwardBlocks(const AttentionParams& p) {
  const std::int64_t width = std::max(p.head_dim, p.value_head_dim());
  const std::int64_t rule = std::clamp<std::int64_t>(8192 / width / 16 * 16, 16, 128);
  std::int64_t Br = rule, Bc = rule;
  if (p.block_mask.active()) {
    Br = BlockAlignedTile(rule, p.block_mask.block_size_q);
    Bc = BlockAlignedTile(rule, p.block_mask.block_size_k);
  }
  return {p.tiling.block_rows > 0 ? p.tiling.block_rows : Br, p.tiling.block_cols > 0 ? p.tiling.block_cols : Bc};
}

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
