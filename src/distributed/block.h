// One kernel call of the ring: some rows of the local queries against some keys of the K/V shard at hand,
// and the mask that makes the library's call compute exactly what the whole sequence's call computes for
// those rows and keys (docs/distributed.md, "Blocks").
#ifndef FLASHATTN_DISTRIBUTED_BLOCK_H_
#define FLASHATTN_DISTRIBUTED_BLOCK_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "flashattn/flashattn.h"

namespace flashattn::distributed {

// The band of the whole sequence's mask at global positions: row p sees key t iff
// p − left ≤ t ≤ p + right, a side of −1 being unbounded. Causal is right = 0 (Nq = Nk: no offset).
struct Band {
  std::int64_t left = -1;
  std::int64_t right = -1;
  static Band Of(const AttentionParams& params);
  bool Unbounded() const { return left < 0 && right < 0; }
};

// Rows [row_begin, row_begin + rows) of the local query buffer against keys [key_begin, key_begin + keys)
// of the K/V buffer. When `contiguous`, those rows and keys are consecutive global positions starting at
// row_position and key_position; a block merged from several (all of its pairs visible, no modifier that
// depends on positions) is not.
struct Block {
  std::int64_t row_begin = 0, rows = 0, row_position = 0;
  std::int64_t key_begin = 0, keys = 0, key_position = 0;
  bool contiguous = true;
  bool full = false;  // every (row, key) pair is visible: no mask needed
};

// The smallest part of `block` (a contiguous one) that holds every visible pair, or nullopt if none is.
// Its rows then each see a key and its keys are each seen, so the band fits the library's bottom-right
// window with both sides ≥ 0 (see LocalCall).
std::optional<Block> VisiblePart(const Band& band, const Block& block);

// `block` split into consecutive row ranges of at most `rows_per_piece` rows, each trimmed to its visible
// part: the ring polls its transfers between pieces.
std::vector<Block> Pieces(const Band& band, const Block& block, std::int64_t rows_per_piece);

// Merges blocks of one step whose pairs are all visible and that share their rows (keys adjacent in the
// buffer) or their keys (rows adjacent), when nothing depends on positions: fewer, larger kernel calls.
std::vector<Block> MergeFullBlocks(std::vector<Block> blocks);

// The library's bottom-right mask (causal, window_left, window_right) that equals `band` on rows ending at
// global position row_end (exclusive) against keys ending at key_end, when the last row sees a key and the
// last key is seen by a row (as after VisiblePart; earlier rows and keys may see nothing). With
// δ = row_end − key_end: left' = left − δ, right' = right + δ, both ≥ 0 then; right' = 0 is the causal mask.
struct LocalMask {
  bool causal = false;
  std::int64_t window_left = -1, window_right = -1;
};
LocalMask MaskFor(const Band& band, std::int64_t row_end, std::int64_t key_end);

// The library call computing `block`: `base` describes the whole local query buffer and K/V buffer
// (pointers, strides, shapes and modifiers at global positions); the result points at the block's rows (q,
// and o when set) and keys and carries the block's mask. Every block of the ring goes through here.
AttentionParams LocalCall(const AttentionParams& base, const Band& band, const Block& block);

}  // namespace flashattn::distributed

#endif  // FLASHATTN_DISTRIBUTED_BLOCK_H_
