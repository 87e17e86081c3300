// create_block_mask: the block mask of the causal/window band and document ids, classified block by block with
// the element predicates of common/score.h.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/checked.h"
#include "common/score.h"
#include "flashattn/forward.h"

namespace flashattn {
namespace {

// Positions [begin, end) of one sequence's document ids: the one id they all share, or none.
struct Uniform {
  bool uniform;
  std::int32_t id;
};
Uniform UniformIds(const std::int32_t* ids, std::int64_t begin, std::int64_t end) {
  for (std::int64_t n = begin + 1; n < end; ++n)
    if (ids[n] != ids[begin]) return {false, 0};
  return {true, ids[begin]};
}

// The class of rows [i0, i1) × keys [j0, j1): the band decides alone unless the documents are mixed, then
// every element is looked at.
BlockClass Classify(const Band& band, std::int64_t offset, const std::int32_t* ids, std::int64_t i0, std::int64_t i1,
                    std::int64_t j0, std::int64_t j1) {
  const IndexRange reach = band.KeysOfDiagonals(i0 + offset, i1 - 1 + offset, j1);
  if (reach.end <= std::max(reach.begin, j0)) return BlockClass::kAbsent;  // the band meets no key of the block
  const bool covered = band.KeysOf(i1 - 1 + offset).begin <= j0 && band.KeysOf(i0 + offset).end >= j1;
  if (ids == nullptr) return covered ? BlockClass::kFull : BlockClass::kPartial;
  const Uniform rows = UniformIds(ids, i0 + offset, i1 + offset), keys = UniformIds(ids, j0, j1);
  if (rows.uniform && keys.uniform) {
    if (rows.id != keys.id) return BlockClass::kAbsent;
    if (covered) return BlockClass::kFull;
  }
  std::int64_t seen = 0;
  for (std::int64_t i = i0; i < i1; ++i)
    for (std::int64_t j = j0; j < j1; ++j) seen += band.Sees(i + offset, j) && ids[i + offset] == ids[j];
  if (seen == 0) return BlockClass::kAbsent;
  return seen == (i1 - i0) * (j1 - j0) ? BlockClass::kFull : BlockClass::kPartial;
}

void CheckArguments(std::int64_t batch, std::int64_t Nq, std::int64_t Nk, std::int64_t Qb, std::int64_t Kb,
                    std::int64_t window_left, std::int64_t window_right, const std::int32_t* document_ids,
                    std::int64_t stride) {
  if (batch < 0 || Nq < 0 || Nk < 0) {
    Fail("create_block_mask needs batch, seqlen_q, seqlen_k >= 0, got ", batch, ", ", Nq, ", ", Nk);
  }
  if (Qb < 1 || Kb < 1) Fail("create_block_mask needs block sizes >= 1, got block_size_q=", Qb, " block_size_k=", Kb);
  if (window_left < -1 || window_right < -1) {
    Fail("window_left and window_right must be >= -1 (-1: unbounded), got ", window_left, ", ", window_right);
  }
  std::int64_t blocks;
  if (!MulAdd((Nq + Qb - 1) / Qb, (Nk + Kb - 1) / Kb, 0, &blocks) || !MulAdd(blocks, batch, 0, &blocks) ||
      blocks > INT32_MAX) {
    Fail("create_block_mask's lists would hold more than 2^31 entries (batch=", batch, " seqlen_q=", Nq,
         " seqlen_k=", Nk, " block_size_q=", Qb, " block_size_k=", Kb, ")");
  }
  if (document_ids == nullptr) return;
  if (Nq > Nk) {
    Fail("document_ids need seqlen_q <= seqlen_k (query row i sits at key position i + seqlen_k - seqlen_q), got "
         "seqlen_q=", Nq, " seqlen_k=", Nk);
  }
  if (stride != 0 && stride < Nk) {
    Fail("document_ids_batch_stride must be 0 (contiguous) or >= seqlen_k=", Nk, ", got ", stride);
  }
}

}  // namespace

BlockMaskLists create_block_mask(std::int64_t batch, std::int64_t seqlen_q, std::int64_t seqlen_k,
                                 std::int64_t block_size_q, std::int64_t block_size_k, bool causal,
                                 std::int64_t window_left, std::int64_t window_right, const std::int32_t* document_ids,
                                 std::int64_t document_ids_batch_stride) {
  CheckArguments(batch, seqlen_q, seqlen_k, block_size_q, block_size_k, window_left, window_right, document_ids,
                 document_ids_batch_stride);
  const Band band = Band::Of(causal, window_left, window_right);
  const std::int64_t offset = seqlen_k - seqlen_q;  // row i's diagonal, bottom-right as every call's
  const std::int64_t stride = document_ids_batch_stride == 0 ? seqlen_k : document_ids_batch_stride;
  BlockMaskLists m;
  m.block_size_q = block_size_q, m.block_size_k = block_size_k, m.batch = batch;
  m.query_blocks = (seqlen_q + block_size_q - 1) / block_size_q;
  m.key_blocks = (seqlen_k + block_size_k - 1) / block_size_k;
  const std::size_t lists = static_cast<std::size_t>(batch * m.query_blocks);
  m.kv_num_blocks.assign(lists, 0);
  m.full_kv_num_blocks.assign(lists, 0);
  m.kv_indices.assign(lists * static_cast<std::size_t>(m.key_blocks), 0);
  m.full_kv_indices.assign(lists * static_cast<std::size_t>(m.key_blocks), 0);
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int32_t* ids = document_ids == nullptr ? nullptr : document_ids + b * stride;
    for (std::int64_t r = 0; r < m.query_blocks; ++r) {
      const std::int64_t list = b * m.query_blocks + r;
      const std::int64_t i0 = r * block_size_q, i1 = std::min(seqlen_q, i0 + block_size_q);
      for (std::int64_t c = 0; c < m.key_blocks; ++c) {
        const std::int64_t j0 = c * block_size_k, j1 = std::min(seqlen_k, j0 + block_size_k);
        switch (Classify(band, offset, ids, i0, i1, j0, j1)) {
          case BlockClass::kAbsent: break;
          case BlockClass::kPartial:
            m.kv_indices[list * m.key_blocks + m.kv_num_blocks[list]++] = static_cast<std::int32_t>(c);
            break;
          case BlockClass::kFull:
            m.full_kv_indices[list * m.key_blocks + m.full_kv_num_blocks[list]++] = static_cast<std::int32_t>(c);
            break;
        }
      }
    }
  }
  return m;
}

}  // namespace flashattn
