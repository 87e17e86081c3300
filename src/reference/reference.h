// The reference attention algorithms of docs/algorithms.md, readable and single-threaded per head (heads run in
// parallel). They are the oracle every fast kernel is tested against:
//   standard.cc — materializes S and P
//   flash1.cc   — FlashAttention-1 (Algorithm 1 of the paper)
//   flash2.cc   — FlashAttention-2 loop order
//   oracle.cc   — standard attention in float64
//   merge.cc    — the merge of partial attention states by LSE, float64
//   decode.cc   — Flash-Decoding over a KV cache: chunks of keys, merged by LSE, float64
//   indexer.cc  — the lightning indexer: every score of a row in float64, then a stable sort
// All of them take already-validated params (flashattn::forward validates).
#ifndef FLASHATTN_REFERENCE_REFERENCE_H_
#define FLASHATTN_REFERENCE_REFERENCE_H_

#include <cstdint>
#include <vector>

#include "flashattn/decode.h"
#include "flashattn/flashattn.h"

namespace flashattn::reference {

// Block sizes of the tiled algorithms: the params' tiling if set, else FlashAttention's rule (docs/algorithms.md)
// Bc = ⌈M / 4d⌉, Br = min(Bc, d), with M the fast-memory size in float32 elements.
struct BlockSizes {
  std::int64_t Br;
  std::int64_t Bc;
};
BlockSizes ChooseBlockSizes(const AttentionParams& params);
// The same blocks cut down to the sequence lengths: a block longer than its sequence holds the same rows
// as one of exactly that length, so the algorithm (and its IO) is unchanged, and scratch stays bounded by
// the problem whatever tiling the caller asks for.
BlockSizes ClampBlockSizes(BlockSizes blocks, const AttentionParams& params);

// The fast-memory tiles of flash1 and flash2, one set per thread: Q_i and O_i (Br rows), K_j and V_j (Bc rows),
// S_ij, the rows' running l_i and m_i, and the dropout multipliers Z_r of one row.
struct Tiles {
  std::vector<float> Q_i, K_j, V_j, O_i, S_ij, l_i, m_i, Z_r;
  Tiles(BlockSizes blocks, std::int64_t d, std::int64_t dv)
      : Q_i(blocks.Br * d), K_j(blocks.Bc * d), V_j(blocks.Bc * dv), O_i(blocks.Br * dv),
        S_ij(blocks.Br * blocks.Bc), l_i(blocks.Br), m_i(blocks.Br), Z_r(blocks.Bc) {}
};

// Given `io`, each adds the main-memory traffic of every (batch, head) to it (problem.h, IoCount).
struct IoCount;
void Standard(const AttentionParams& params, IoCount* io = nullptr);
void Flash1(const AttentionParams& params, IoCount* io = nullptr);
void Flash2(const AttentionParams& params, IoCount* io = nullptr);
void Oracle(const AttentionParams& params);

// The float64 oracle for query rows [row_begin, row_end) of problem (b, h): o is rows×dv, lse is per row
// (−inf for a row that sees no key).
struct OracleRows {
  std::vector<double> o;
  std::vector<double> lse;
};
OracleRows OracleHeadRows(const AttentionParams& params, std::int64_t b, std::int64_t h,
                          std::int64_t row_begin, std::int64_t row_end);

// The attention state of one query row over a set of keys: normalized output O and LSE (−∞ if empty).
struct AttentionState {
  std::vector<double> O;
  double lse;
};
AttentionState MergeStates(const AttentionState& a, const AttentionState& b);
// merge_attention_states as a left fold of MergeStates over the partials.
void MergeAttentionStates(const MergeParams& params);
// decode() the readable way: append, then per query row attention over `num_splits` chunks (1 if 0) in
// float64, merged with MergeStates. Takes validated params.
void Decode(const DecodeParams& params);
// lightning_indexer() the readable way: a row's scores in full, in float64, stably sorted. Takes validated
// params.
void LightningIndexer(const IndexerParams& params);

}  // namespace flashattn::reference

#endif  // FLASHATTN_REFERENCE_REFERENCE_H_
