// Block sizes of the fused kernel from the per-core cache sizes (docs/fused_kernel.md, "Block sizes").
#include <algorithm>

#include "common/cpu_caches.h"
#include "common/score.h"
#include "forward/forward.h"

namespace flashattn::forward_kernel {

FusedTiling ChooseFusedTiling(const AttentionParams& params) {
  const std::int64_t d = params.head_dim, dv = params.value_head_dim();
  // Starts from FlashAttention's rule (docs/algorithms.md) with M = the per-core L2 in float32 elements,
  // Bc = ⌈M / 4·max(d, dv)⌉, and adapts it to this kernel (docs/fused_kernel.md, "Block sizes"): half that
  // Bc, a multiple of 32 keys (whole panels of two vectors up to AVX-512) within [32, 512]; then the largest
  // Br, a multiple of the 6-row register tile, whose working set Br·(d + Bc + dv) [Q_i, S_ij, Õ] +
  // Bc·(d + dv) [K_j, V_j] fits in M. Long Q blocks mean fewer passes over K and V, which measured faster
  // than FlashAttention's Br = min(Bc, d).
  const std::int64_t M = DetectedCpuCaches().l2.bytes / 4;
  const std::int64_t rule_Bc = (M + 4 * std::max(d, dv) - 1) / (4 * std::max(d, dv));
  std::int64_t Bc = std::clamp<std::int64_t>(rule_Bc / 2 / 32 * 32, 32, 512);
  std::int64_t Br = std::max<std::int64_t>((M - Bc * (d + dv)) / (d + Bc + dv), 6) / 6 * 6;
  if (params.block_mask.active()) {  // tiles that do not straddle the mask's blocks
    Br = BlockAlignedTile(Br, params.block_mask.block_size_q);
    Bc = BlockAlignedTile(Bc, params.block_mask.block_size_k);
  }
  if (params.tiling.block_rows > 0) Br = params.tiling.block_rows;
  if (params.tiling.block_cols > 0) Bc = params.tiling.block_cols;
  return {Br, Bc};
}

}  // namespace flashattn::forward_kernel
