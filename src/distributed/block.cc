#include "distributed/block.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "flashattn/flashattn.h"

namespace flashattn::distributed {

std::optional<Block> VisiblePart(const Band& band, const Block& block) {
  if (block.rows == 0 || block.keys == 0) return std::nullopt;
  if (!block.contiguous) return block;
  // Global rows [R, R + nr) and keys [K, K + nk): row p sees a key iff K − right ≤ p ≤ K + nk − 1 + left;
  // key t is seen iff R − left ≤ t ≤ R + nr − 1 + right.
  const std::int64_t R = block.row_position, nr = block.rows, K = block.key_position, nk = block.keys;
  // (An unbounded side's reach, kUnboundedReach, leaves the block's own bounds.)
  const std::int64_t first_row = std::max(R, K - band.right), last_row = std::min(R + nr - 1, K + nk - 1 + band.left);
  const std::int64_t first_key = std::max(K, R - band.left), last_key = std::min(K + nk - 1, R + nr - 1 + band.right);
  if (first_row > last_row || first_key > last_key) return std::nullopt;
  Block part;
  part.row_begin = block.row_begin + (first_row - R);
  part.rows = last_row - first_row + 1;
  part.row_position = first_row;
  part.key_begin = block.key_begin + (first_key - K);
  part.keys = last_key - first_key + 1;
  part.key_position = first_key;
  // All pairs visible iff the last row's lower bound and the first row's upper bound admit every key.
  part.full = last_row - band.left <= first_key && first_row + band.right >= last_key;
  return part;
}

std::vector<Block> Pieces(const Band& band, const Block& block, std::int64_t rows_per_piece) {
  std::vector<Block> pieces;
  for (std::int64_t begin = 0; begin < block.rows; begin += rows_per_piece) {
    Block piece = block;
    piece.row_begin = block.row_begin + begin;
    piece.row_position = block.row_position + begin;
    piece.rows = std::min(rows_per_piece, block.rows - begin);
    if (block.full) {
      pieces.push_back(piece);
    } else if (const std::optional<Block> part = VisiblePart(band, piece)) {
      pieces.push_back(*part);
    }
  }
  return pieces;
}

std::vector<Block> MergeFullBlocks(std::vector<Block> blocks) {
  auto merge_into = [](Block& a, const Block& b) {
    if (!a.full || !b.full) return false;
    if (a.row_begin == b.row_begin && a.rows == b.rows && a.key_begin + a.keys == b.key_begin) {
      a.keys += b.keys;
    } else if (a.key_begin == b.key_begin && a.keys == b.keys && a.row_begin + a.rows == b.row_begin) {
      a.rows += b.rows;
    } else {
      return false;
    }
    a.contiguous = false;
    return true;
  };
  // Keys first (a row chunk against both key chunks), then rows (both row chunks against the same keys).
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<Block> merged;
    for (const Block& block : blocks) {
      bool absorbed = false;
      for (Block& into : merged) {
        const bool same_axis = pass == 0 ? into.row_begin == block.row_begin : into.key_begin == block.key_begin;
        if (same_axis && merge_into(into, block)) {
          absorbed = true;
          break;
        }
      }
      if (!absorbed) merged.push_back(block);
    }
    blocks = std::move(merged);
  }
  return blocks;
}

AttentionParams LocalCall(const AttentionParams& base, std::int64_t seqlen, const Block& block) {
  AttentionParams call = base;
  const std::int64_t element = static_cast<std::int64_t>(size_of(base.dtype));
  call.q = static_cast<const char*>(base.q) + block.row_begin * base.q_strides.seq * element;
  call.k = static_cast<const char*>(base.k) + block.key_begin * base.k_strides.seq * element;
  call.v = static_cast<const char*>(base.v) + block.key_begin * base.v_strides.seq * element;
  if (base.o != nullptr) call.o = static_cast<char*>(base.o) + block.row_begin * base.o_strides.seq * element;
  call.seqlen_q = block.rows;
  call.seqlen_k = block.keys;
  if (block.contiguous) call.block_position = {block.row_position, block.key_position, seqlen, seqlen};
  if (block.full) {  // no band to test: the kernels skip the masking of every tile
    call.causal = false;
    call.window_left = call.window_right = -1;
  }
  return call;
}

}  // namespace flashattn::distributed
