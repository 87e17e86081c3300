// One kernel call of the ring: some rows of the local queries against some keys of the K/V shard at hand,
// placed in the whole sequence's problem by the library's block position (docs/distributed.md, "Blocks").
#ifndef FLASHATTN_DISTRIBUTED_BLOCK_H_
#define FLASHATTN_DISTRIBUTED_BLOCK_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "common/score.h"
#include "flashattn/flashattn.h"

namespace flashattn::distributed {

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
// `band` is the whole sequence's: its queries and keys are the same positions, so global row p sees key t
// iff band.Sees(p, t).
std::optional<Block> VisiblePart(const Band& band, const Block& block);

// `block` split into consecutive row ranges of at most `rows_per_piece` rows, each trimmed to its visible
// part: the ring polls its transfers between pieces.
std::vector<Block> Pieces(const Band& band, const Block& block, std::int64_t rows_per_piece);

// Merges blocks of one step whose pairs are all visible and that share their rows (keys adjacent in the
// buffer) or their keys (rows adjacent), when nothing depends on positions: fewer, larger kernel calls.
std::vector<Block> MergeFullBlocks(std::vector<Block> blocks);

// The library call computing `block` of a sequence of `seqlen` positions (queries and keys): `base`
// describes the whole local query buffer and K/V buffer (pointers, strides, shapes and modifiers at global
// positions); the result points at the block's rows (q, and o when set) and keys, and carries the block's
// position in the sequence, so that the band, ALiBi and dropout are the whole sequence's. A merged block has
// no position: every pair of it is visible and nothing depends on positions. Every block of the ring goes
// through here.
AttentionParams LocalCall(const AttentionParams& base, std::int64_t seqlen, const Block& block);

}  // namespace flashattn::distributed

#endif  // FLASHATTN_DISTRIBUTED_BLOCK_H_
