// Where the causal/window band of SPEC §5 lies, and the per-(batch, head) modifiers, as the fused kernel
// needs them: which keys a row sees, which K/V blocks a Q block must visit, and which of those are fully
// inside the band. Semantics equal reference::HeadProblem::Visible and Score.
#ifndef FLASHATTN_KERNELS_MASK_GEOMETRY_H_
#define FLASHATTN_KERNELS_MASK_GEOMETRY_H_

#include <algorithm>
#include <cstdint>

#include "common/window.h"
#include "flashattn/flashattn.h"

namespace flashattn::kernels {

// Keys [first, last] of one row (empty when first > last), not yet clipped to [0, Nk).
struct VisibleKeys {
  std::int64_t first, last;
};

struct ScoreModifiers {
  // Row i's diagonal is key i + offset (offset = Nk − Nq, bottom-right alignment); it sees keys
  // [i + offset − left, i + offset + right].
  std::int64_t offset = 0;
  std::int64_t left = kUnboundedReach, right = kUnboundedReach;
  float softcap = 0.0f;      // 0 = off
  float alibi_slope = 0.0f;  // 0 = off
  MaskKind mask_kind = MaskKind::kNone;
  const void* mask = nullptr;  // offset to this (batch, head)
  std::int64_t mask_stride_row = 0, mask_stride_col = 0;

  ScoreModifiers(const AttentionParams& p, std::int64_t b, std::int64_t h)
      : offset(p.seqlen_k - p.seqlen_q),
        left(WindowReachOf(p.causal, p.window_left, p.window_right).left),
        right(WindowReachOf(p.causal, p.window_left, p.window_right).right),
        softcap(p.softcap),
        alibi_slope(p.alibi_slopes == nullptr ? 0.0f : p.alibi_slopes[b * p.alibi_batch_stride + h]),
        mask_kind(p.mask.kind),
        mask_stride_row(p.mask.stride_row),
        mask_stride_col(p.mask.stride_col) {
    if (mask_kind != MaskKind::kNone && p.mask.data != nullptr) {  // null only when the mask is empty
      const std::int64_t bytes = mask_kind == MaskKind::kBool ? 1 : 4;
      mask = static_cast<const char*>(p.mask.data) + (b * p.mask.stride_batch + h * p.mask.stride_head) * bytes;
    }
  }

  VisibleKeys KeysOf(std::int64_t i) const { return {i + offset - left, i + offset + right}; }

  // Keys any of rows [i0, i1) may see, clipped to [0, Nk): K/V blocks outside it are skipped.
  VisibleKeys KeysOfRows(std::int64_t i0, std::int64_t i1, std::int64_t Nk) const {
    return {std::max<std::int64_t>(0, KeysOf(i0).first), std::min(Nk - 1, KeysOf(i1 - 1).last)};
  }

  // Whether every row of [i0, i1) sees every key of [j0, j1) as far as the band is concerned.
  bool BandCovers(std::int64_t i0, std::int64_t i1, std::int64_t j0, std::int64_t j1) const {
    return KeysOf(i1 - 1).first <= j0 && KeysOf(i0).last >= j1 - 1;
  }

  // Whether row i sees key j: inside the band and kept by the boolean mask, if any.
  bool Sees(std::int64_t i, std::int64_t j) const {
    const VisibleKeys keys = KeysOf(i);
    if (j < keys.first || j > keys.last) return false;
    return mask_kind != MaskKind::kBool ||
           static_cast<const std::uint8_t*>(mask)[i * mask_stride_row + j * mask_stride_col] != 0;
  }

  // Whether some row of [i0, i1) may not see some key of [j0, j1): a band boundary or a boolean mask.
  bool TileMayHideKeys(std::int64_t i0, std::int64_t i1, std::int64_t j0, std::int64_t j1) const {
    return mask_kind == MaskKind::kBool || !BandCovers(i0, i1, j0, j1);
  }

  // Whether the tile's scores need anything beyond s·q·k: a band boundary or a per-element modifier.
  bool TileNeedsModifiers(std::int64_t i0, std::int64_t i1, std::int64_t j0, std::int64_t j1) const {
    return softcap > 0.0f || alibi_slope != 0.0f || mask_kind != MaskKind::kNone || !BandCovers(i0, i1, j0, j1);
  }
};

}  // namespace flashattn::kernels

#endif  // FLASHATTN_KERNELS_MASK_GEOMETRY_H_
