#include "common/dropout.h"

#include <algorithm>

namespace flashattn {

Dropout::Dropout(const AttentionParams& p) : Dropout(p, BlockPlacement::Of(p)) {}

Dropout::Dropout(const AttentionParams& p, const BlockPlacement& placement)
    : Hq_(static_cast<std::uint64_t>(p.heads_q)),
      Nq_(static_cast<std::uint64_t>(placement.total_q)),
      blocks_per_row_(static_cast<std::uint64_t>((placement.total_k + 3) / 4)),
      query_start_(placement.query_start),
      key_start_(placement.key_start),
      offset_lo_(static_cast<std::uint32_t>(p.dropout_offset)),
      offset_hi_(static_cast<std::uint32_t>(p.dropout_offset >> 32)),
      key_{static_cast<std::uint32_t>(p.dropout_seed), static_cast<std::uint32_t>(p.dropout_seed >> 32)},
      threshold_(static_cast<std::uint64_t>(static_cast<double>(p.dropout_p) * 4294967296.0)),
      kept_scale_(1.0f / (1.0f - p.dropout_p)) {}

void Dropout::RowMultipliers(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0, std::int64_t n,
                             float* Z) const {
  if (!Active()) {
    std::fill(Z, Z + n, 1.0f);
    return;
  }
  const std::uint64_t row = Block(b, h, i);
  const std::int64_t first = key_start_ + j0, end = first + n;  // the keys' positions in the problem
  for (std::int64_t key = first; key < end;) {  // one Philox call serves keys 4⌊key/4⌋ .. 4⌊key/4⌋ + 3
    const std::int64_t group = key / 4;
    const auto words =
        Philox4x32_10({static_cast<std::uint32_t>(row + group),
                       static_cast<std::uint32_t>((row + group) >> 32), offset_lo_, offset_hi_},
                      key_);
    for (; key < end && key / 4 == group; ++key) Z[key - first] = words[key % 4] >= threshold_ ? kept_scale_ : 0.0f;
  }
}

}  // namespace flashattn
