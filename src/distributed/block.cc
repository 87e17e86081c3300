#include "distributed/block.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "flashattn/flashattn.h"

namespace flashattn::distributed {

Band Band::Of(const AttentionParams& params) {
  return Band{params.window_left, params.causal ? 0 : params.window_right};
}

std::optional<Block> VisiblePart(const Band& band, const Block& block) {
  if (block.rows == 0 || block.keys == 0) return std::nullopt;
  if (!block.contiguous) return block;
  // Global rows [R, R + nr) and keys [K, K + nk): row p sees a key iff K − right ≤ p ≤ K + nk − 1 + left;
  // key t is seen iff R − left ≤ t ≤ R + nr − 1 + right.
  const std::int64_t R = block.row_position, nr = block.rows, K = block.key_position, nk = block.keys;
  std::int64_t first_row = R, last_row = R + nr - 1, first_key = K, last_key = K + nk - 1;
  if (band.right >= 0) {
    first_row = std::max(first_row, K - band.right);
    last_key = std::min(last_key, R + nr - 1 + band.right);
  }
  if (band.left >= 0) {
    last_row = std::min(last_row, K + nk - 1 + band.left);
    first_key = std::max(first_key, R - band.left);
  }
  if (first_row > last_row || first_key > last_key) return std::nullopt;
  Block part;
  part.row_begin = block.row_begin + (first_row - R);
  part.rows = last_row - first_row + 1;
  part.row_position = first_row;
  part.key_begin = block.key_begin + (first_key - K);
  part.keys = last_key - first_key + 1;
  part.key_position = first_key;
  // All pairs visible iff the last row's lower bound and the first row's upper bound admit every key.
  part.full =
      (band.left < 0 || last_row - band.left <= first_key) && (band.right < 0 || first_row + band.right >= last_key);
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

LocalMask MaskFor(const Band& band, std::int64_t row_end, std::int64_t key_end) {
  // Row i of n sits at p = row_end − n + i and key j of m at t = key_end − m + j; the library's row i sees
  // key j iff i + (m − n) − left' ≤ j ≤ i + (m − n) + right', the band iff p − left ≤ t ≤ p + right.
  const std::int64_t delta = row_end - key_end;
  LocalMask mask;
  if (band.left >= 0) mask.window_left = band.left - delta;
  if (band.right >= 0) {
    if (band.right + delta == 0) {
      mask.causal = true;  // the library's causal path: the same mask
    } else {
      mask.window_right = band.right + delta;
    }
  }
  return mask;
}

AttentionParams LocalCall(const AttentionParams& base, const Band& band, const Block& block) {
  AttentionParams call = base;
  const std::int64_t element = static_cast<std::int64_t>(size_of(base.dtype));
  call.q = static_cast<const char*>(base.q) + block.row_begin * base.q_strides.seq * element;
  call.k = static_cast<const char*>(base.k) + block.key_begin * base.k_strides.seq * element;
  call.v = static_cast<const char*>(base.v) + block.key_begin * base.v_strides.seq * element;
  if (base.o != nullptr) call.o = static_cast<char*>(base.o) + block.row_begin * base.o_strides.seq * element;
  call.seqlen_q = block.rows;
  call.seqlen_k = block.keys;
  call.causal = false;
  call.window_left = -1;
  call.window_right = -1;
  if (block.full) return call;
  const LocalMask mask = MaskFor(band, block.row_position + block.rows, block.key_position + block.keys);
  call.causal = mask.causal;
  call.window_left = mask.window_left;
  call.window_right = mask.window_right;
  return call;
}

}  // namespace flashattn::distributed
