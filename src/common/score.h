// Which keys a query row sees and what the score of each pair is: the causal/sliding-window band, document
// ids, the mask tensor, the block mask, the scale, softcap and ALiBi; and the attention sink that joins each
// row's softmax. The one description that the reference algorithms, the fused forward and backward kernels
// and decode all use, so that they agree (docs/algorithms.md derives it; the kernels apply the same steps to
// whole tiles in simd/score_modifiers-inl.h).
//
// Query row i of Nq rows against Nk keys has the diagonal i + Nk − Nq: the key it is aligned with (the last
// row with the last key, flash-attn's bottom-right alignment); a call that is one block of a larger problem
// takes that problem's diagonals (BlockPlacement). The row on diagonal δ sees the keys
// [δ − left, δ + right] of the band, less those a boolean mask tensor drops.
#ifndef FLASHATTN_COMMON_SCORE_H_
#define FLASHATTN_COMMON_SCORE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "common/constants.h"
#include "flashattn/flashattn.h"

namespace flashattn {

// Far beyond any position, and safe to add to one: a reach of −1 (unbounded) becomes this, and any larger
// reach is clamped to it, since it sees the same keys and diagonal ± reach would overflow.
inline constexpr std::int64_t kUnboundedReach = INT64_MAX / 4;

// Positions [begin, end); empty when begin ≥ end.
struct IndexRange {
  std::int64_t begin, end;
};

// The band: the reaches left and right of each row's diagonal.
struct Band {
  std::int64_t left = kUnboundedReach;
  std::int64_t right = kUnboundedReach;

  // Causal is the window (left, 0), as in flash-attn; a reach of −1 is unbounded.
  static Band Of(bool causal, std::int64_t window_left, std::int64_t window_right) {
    const auto reach = [](std::int64_t w) { return w < 0 ? kUnboundedReach : std::min(w, kUnboundedReach); };
    return {reach(window_left), causal ? 0 : reach(window_right)};
  }
  // The band of a call's params (AttentionParams or DecodeParams).
  template <class Params>
  static Band Of(const Params& p) {
    return Of(p.causal, p.window_left, p.window_right);
  }

  bool Sees(std::int64_t diagonal, std::int64_t j) const { return j >= diagonal - left && j <= diagonal + right; }
  // The keys of the row on `diagonal`, not clipped to the sequence.
  IndexRange KeysOf(std::int64_t diagonal) const { return {diagonal - left, diagonal + right + 1}; }
  // The keys that some row with a diagonal in [first, last] sees, clipped to [0, Nk).
  IndexRange KeysOfDiagonals(std::int64_t first, std::int64_t last, std::int64_t Nk) const {
    const std::int64_t begin = std::clamp<std::int64_t>(first - left, 0, Nk);
    return {begin, std::clamp<std::int64_t>(last + right + 1, begin, Nk)};
  }
};

// The score of a pair that the row sees, from q·k (T: float, or double in the float64 oracles):
//   S = s·q·k,   then S ← c·tanh(S / c) with softcap c > 0,   then S ← S − slope·|diagonal − j| (ALiBi),
// `distance` = |diagonal − j|. An additive mask is added after these (ScoreModifiers::Score).
template <typename T>
T ModifiedScore(T q_dot_k, float scale, float softcap, float alibi_slope, std::int64_t distance) {
  T s = static_cast<T>(scale) * q_dot_k;
  if (softcap > 0) s = static_cast<T>(softcap) * std::tanh(s / static_cast<T>(softcap));
  if (alibi_slope != 0) s -= static_cast<T>(alibi_slope) * static_cast<T>(distance);
  return s;
}

// s: params.scale, or 1/√d.
template <class Params>
float SoftmaxScale(const Params& p) {
  return p.scale.value_or(1.0f / std::sqrt(static_cast<float>(p.head_dim)));
}

// The ALiBi slope of query head h of sequence b (0 = none).
template <class Params>
float AlibiSlope(const Params& p, std::int64_t b, std::int64_t h) {
  return p.alibi_slopes == nullptr ? 0.0f : p.alibi_slopes[b * p.alibi_batch_stride + h];
}

// A call's AttentionSettings::block_position with the totals resolved: query rows [query_start, query_start
// + Nq) of total_q against keys [key_start, key_start + Nk) of total_k. The default is the whole problem.
struct BlockPlacement {
  std::int64_t query_start = 0, key_start = 0, total_q = 0, total_k = 0;

  static BlockPlacement Of(const AttentionParams& p) {
    const BlockPosition& at = p.block_position;
    return {at.query_start, at.key_start, at.total_seqlen_q < 0 ? p.seqlen_q : at.total_seqlen_q,
            at.total_seqlen_k < 0 ? p.seqlen_k : at.total_seqlen_k};
  }
  // Local row i is global row query_start + i, aligned with global key query_start + i + total_k − total_q,
  // which is local key (that) − key_start: the diagonal is i + DiagonalOffset().
  std::int64_t DiagonalOffset() const { return query_start + total_k - total_q - key_start; }
};

// Row i of sequence b of a decode call over Nk keys has the diagonal i + DecodeDiagonalOffset(p, b, Nk): its
// queries are the last Nq_b positions of a sequence that continues keys_after[b] keys past the call's keys.
inline std::int64_t DecodeDiagonalOffset(const DecodeParams& p, std::int64_t b, std::int64_t Nk) {
  return Nk + (p.keys_after == nullptr ? 0 : p.keys_after[b]) - p.query_rows(b);
}

// The attention sink of query head h: its logit s_h, or −∞ (no sink; the identity of the row's softmax state).
template <class Params>
float SinkOf(const Params& p, std::int64_t h) {
  return p.sinks == nullptr ? kNegInf : p.sinks[h];
}

// A row's softmax state (m, l) before its first key: the sink as one logit without a value, (s_h, 1), or the
// empty state (−∞, 0) without one. The empty state is what a sink of −∞ gives, so that such a sink changes no
// bit of any result.
struct RowStart {
  float m, l;
};
inline RowStart SoftmaxRowStart(float sink) { return sink == kNegInf ? RowStart{kNegInf, 0.0f} : RowStart{sink, 1.0f}; }

// P_i,sink·(0 − D_i) = −e^{s_h − LSE_i}·D_i: row i's term of dsink_h (0 without a sink), D_i = dO_i · O_i. The
// sink has no value, so its dP is 0 (docs/backward.md).
template <typename T>
T SinkGradientTerm(float sink, T lse, T D) {
  return sink == kNegInf ? T{0} : -std::exp(static_cast<T>(sink) - lse) * D;
}

// What a block mask makes of one (query block, key block) pair: never visited, visited with the element
// predicates (band, document ids, mask tensor), or visited whole.
enum class BlockClass : std::uint8_t { kAbsent = 0, kPartial = 1, kFull = 2 };

// The lists of one (batch, head) of a BlockMask, and the classes they give (BlockMask in flashattn/types.h).
struct BlockLists {
  std::int64_t Qb = 1, Kb = 1, Tq = 0, Tk = 0;  // block sizes; query blocks ⌈Nq / Qb⌉, key blocks ⌈Nk / Kb⌉
  const std::int32_t* num = nullptr;    // per query block; null: no block mask
  const std::int32_t* indices = nullptr;
  std::int64_t width = 0;
  const std::int32_t* full_num = nullptr;  // null: no full blocks
  const std::int32_t* full_indices = nullptr;
  std::int64_t full_width = 0;

  BlockLists() = default;
  BlockLists(const AttentionParams& p, std::int64_t b, std::int64_t h) {
    const BlockMask& m = p.block_mask;
    if (!m.active()) return;
    Qb = m.block_size_q, Kb = m.block_size_k, Tq = (p.seqlen_q + Qb - 1) / Qb, Tk = (p.seqlen_k + Kb - 1) / Kb;
    const std::int64_t list = b * m.heads + (m.heads == 1 ? 0 : h);  // (batch, head) of the mask
    num = m.kv_num_blocks + list * Tq;
    indices = m.kv_indices + list * Tq * m.kv_width;
    width = m.kv_width;
    if (m.full_kv_num_blocks != nullptr) {
      full_num = m.full_kv_num_blocks + list * Tq;
      full_indices = m.full_kv_indices + list * Tq * m.full_kv_width;
      full_width = m.full_kv_width;
    }
  }
  bool Active() const { return num != nullptr; }

  // Query block r's key blocks, partial then full (f(c, class)), in the lists' order.
  template <class F>
  void ForEachListed(std::int64_t r, F f) const {
    for (std::int32_t n = 0; n < num[r]; ++n) f(indices[r * width + n], BlockClass::kPartial);
    if (full_num == nullptr) return;
    for (std::int32_t n = 0; n < full_num[r]; ++n) f(full_indices[r * full_width + n], BlockClass::kFull);
  }
  // The class of key block c for query block r, from the lists.
  BlockClass Find(std::int64_t r, std::int64_t c) const {
    BlockClass found = BlockClass::kAbsent;
    ForEachListed(r, [&](std::int64_t listed, BlockClass cls) {
      if (listed == c) found = cls;
    });
    return found;
  }
  // The classes of query blocks [r0, r0 + count) as a table: out[(r − r0)·Tk + c].
  void FillClasses(std::int64_t r0, std::int64_t count, std::uint8_t* out) const {
    std::fill(out, out + count * Tk, static_cast<std::uint8_t>(BlockClass::kAbsent));
    for (std::int64_t r = r0; r < r0 + count; ++r) {
      std::uint8_t* row = out + (r - r0) * Tk;
      ForEachListed(r, [&](std::int64_t c, BlockClass cls) { row[c] = static_cast<std::uint8_t>(cls); });
    }
  }
};

// A kernel tile's rows (or keys) under a block mask of `block` rows (keys) per block, from the kernel's own
// size `rule`: tiles that do not straddle blocks, so that a tile is visited only for its own blocks. A block
// up to the rule is one tile, or whole blocks up to 32 rows (a tile of 1 row would waste the register tiles);
// a larger block is cut into its largest divisor up to the rule, unless that is below half the rule (a size
// like a large prime: the rule's tiles then straddle blocks).
inline std::int64_t BlockAlignedTile(std::int64_t rule, std::int64_t block) {
  if (block <= rule) {
    const std::int64_t least = std::min<std::int64_t>(rule, 32);
    return std::min(rule, (least + block - 1) / block * block);
  }
  for (std::int64_t tile = rule; tile >= std::max<std::int64_t>(1, rule / 2); --tile)
    if (block % tile == 0) return tile;
  return rule;
}

// Everything that decides the scores of one (batch b, query head h) of a forward, backward or decode call.
struct ScoreModifiers {
  std::int64_t offset = 0;  // row i's diagonal is i + offset: Nk − Nq for a whole problem (BlockPlacement)
  Band band;
  float scale = 1.0f;        // s
  float softcap = 0.0f;      // 0 = off
  float alibi_slope = 0.0f;  // 0 = off
  MaskKind mask_kind = MaskKind::kNone;
  const void* mask = nullptr;  // offset to this (batch, head); null only when the mask is empty
  std::int64_t mask_stride_row = 0, mask_stride_col = 0;
  float sink = kNegInf;  // s_h, a term of the row's softmax rather than of a score (SoftmaxRowStart)
  const std::int32_t* documents = nullptr;  // this sequence's document id per key position; null = none
  BlockLists blocks;                        // the block mask of this (b, h); inactive = none
  // Optional table of classes of query blocks [classes_r0, …) (BlockLists::FillClasses): the kernels' fast
  // lookup; without it the lists are searched.
  const std::uint8_t* classes = nullptr;
  std::int64_t classes_r0 = 0;

  ScoreModifiers(const AttentionParams& p, std::int64_t b, std::int64_t h)
      : offset(BlockPlacement::Of(p).DiagonalOffset()),
        band(Band::Of(p)),
        scale(SoftmaxScale(p)),
        softcap(p.softcap),
        alibi_slope(AlibiSlope(p, b, h)),
        mask_kind(p.mask.kind),
        mask_stride_row(p.mask.stride_row),
        mask_stride_col(p.mask.stride_col),
        sink(SinkOf(p, h)),
        blocks(p, b, h) {
    if (p.document_ids != nullptr) {
      const std::int64_t stride = p.document_ids_batch_stride == 0 ? p.seqlen_k : p.document_ids_batch_stride;
      documents = p.document_ids + b * stride;
    }
    if (mask_kind != MaskKind::kNone && p.mask.data != nullptr) {
      const std::int64_t bytes = mask_kind == MaskKind::kBool ? 1 : 4;
      mask = static_cast<const char*>(p.mask.data) + (b * p.mask.stride_batch + h * p.mask.stride_head) * bytes;
    }
  }

  // Query head h of sequence b of a decode call over its Nk keys: no mask tensor, row i on the diagonal
  // i + DecodeDiagonalOffset(p, b, Nk).
  ScoreModifiers(const DecodeParams& p, std::int64_t b, std::int64_t h, std::int64_t Nk)
      : offset(DecodeDiagonalOffset(p, b, Nk)),
        band(Band::Of(p)),
        scale(SoftmaxScale(p)),
        softcap(p.softcap),
        alibi_slope(AlibiSlope(p, b, h)),
        sink(SinkOf(p, h)) {}

  std::int64_t Diagonal(std::int64_t i) const { return i + offset; }
  // Row i's keys as far as the band is concerned, not clipped to the sequence.
  IndexRange KeysOf(std::int64_t i) const { return band.KeysOf(Diagonal(i)); }
  // Keys that some row of [i0, i1) may see, clipped to [0, Nk): K/V blocks outside it are skipped.
  IndexRange KeysOfRows(std::int64_t i0, std::int64_t i1, std::int64_t Nk) const {
    return band.KeysOfDiagonals(Diagonal(i0), Diagonal(i1 - 1), Nk);
  }
  // Rows whose band meets keys [j0, j1), clipped to [0, Nq): the Q blocks a K/V block must visit.
  IndexRange RowsOfKeys(std::int64_t j0, std::int64_t j1, std::int64_t Nq) const {
    const std::int64_t begin = std::clamp<std::int64_t>(j0 - band.right - offset, 0, Nq);
    return {begin, std::clamp<std::int64_t>(j1 - 1 + band.left - offset + 1, begin, Nq)};
  }
  // Whether every row of [i0, i1) sees every key of [j0, j1) as far as the band is concerned.
  bool BandCovers(std::int64_t i0, std::int64_t i1, std::int64_t j0, std::int64_t j1) const {
    return KeysOf(i1 - 1).begin <= j0 && KeysOf(i0).end >= j1;
  }

  // The boolean mask's verdict on (i, j), and the additive mask's term.
  bool MaskKeeps(std::int64_t i, std::int64_t j) const {
    return static_cast<const std::uint8_t*>(mask)[i * mask_stride_row + j * mask_stride_col] != 0;
  }
  float MaskBias(std::int64_t i, std::int64_t j) const {
    return static_cast<const float*>(mask)[i * mask_stride_row + j * mask_stride_col];
  }

  // Whether row i and key j share a document (rows sit at key position Diagonal(i)); true without ids.
  bool SameDocument(std::int64_t i, std::int64_t j) const {
    return documents == nullptr || documents[Diagonal(i)] == documents[j];
  }

  // The block mask: whether there is one, and the class of query block r against key block c (kPartial
  // without one: the element predicates then apply everywhere).
  bool BlockSparse() const { return blocks.Active(); }
  void UseClasses(const std::uint8_t* table, std::int64_t r0) { classes = table, classes_r0 = r0; }
  BlockClass ClassOf(std::int64_t r, std::int64_t c) const {
    if (!BlockSparse()) return BlockClass::kPartial;
    if (classes != nullptr) return static_cast<BlockClass>(classes[(r - classes_r0) * blocks.Tk + c]);
    return blocks.Find(r, c);
  }
  BlockClass ClassAt(std::int64_t i, std::int64_t j) const { return ClassOf(i / blocks.Qb, j / blocks.Kb); }
  // Over the block pairs that rows [i0, i1) × keys [j0, j1) meet: whether any is visited, any full, all full.
  struct TileBlocks {
    bool any, any_full, all_full;
  };
  TileBlocks BlocksOfTile(std::int64_t i0, std::int64_t i1, std::int64_t j0, std::int64_t j1) const {
    TileBlocks t{false, false, true};
    for (std::int64_t r = i0 / blocks.Qb; r <= (i1 - 1) / blocks.Qb; ++r) {
      for (std::int64_t c = j0 / blocks.Kb; c <= (j1 - 1) / blocks.Kb; ++c) {
        const BlockClass cls = ClassOf(r, c);
        t.any |= cls != BlockClass::kAbsent;
        t.any_full |= cls == BlockClass::kFull;
        t.all_full &= cls == BlockClass::kFull;
      }
    }
    return t;
  }
  // Whether the band lets some row of [i0, i1) see some key of [j0, j1).
  bool BandMeets(std::int64_t i0, std::int64_t i1, std::int64_t j0, std::int64_t j1) const {
    return KeysOf(i0).begin < j1 && KeysOf(i1 - 1).end > j0;
  }
  // Whether a kernel visits the tile rows [i0, i1) × keys [j0, j1) under a block mask: it meets a full block,
  // or a partial one that the band reaches (a tile of partial and absent blocks outside the band, as the
  // quarter above the diagonal of a causal block cut into four tiles, would add exact zeros only).
  bool VisitsTile(std::int64_t i0, std::int64_t i1, std::int64_t j0, std::int64_t j1) const {
    const TileBlocks t = BlocksOfTile(i0, i1, j0, j1);
    return t.any_full || (t.any && BandMeets(i0, i1, j0, j1));
  }

  // Whether key j is inside row i's band; whether the element predicates keep (i, j): the band, the
  // documents and the boolean mask; whether row i sees key j: the predicates on a partial block (and without
  // a block mask), none on a full block, never on an absent one. (An additive mask's −∞ is arithmetic: it
  // makes S_ij = −∞ and P_ij = 0, but the pair is seen.)
  bool Visible(std::int64_t i, std::int64_t j) const { return band.Sees(Diagonal(i), j); }
  bool PredicatesKeep(std::int64_t i, std::int64_t j) const {
    return Visible(i, j) && SameDocument(i, j) && (mask_kind != MaskKind::kBool || MaskKeeps(i, j));
  }
  bool Sees(std::int64_t i, std::int64_t j) const {
    switch (ClassAt(i, j)) {
      case BlockClass::kAbsent: return false;
      case BlockClass::kFull: return true;
      case BlockClass::kPartial: break;
    }
    return PredicatesKeep(i, j);
  }

  // Whether some row of [i0, i1) may not see some key of [j0, j1): a tile not all of full blocks under a
  // block mask; else a band boundary, document ids or a boolean mask.
  bool TileMayHideKeys(std::int64_t i0, std::int64_t i1, std::int64_t j0, std::int64_t j1) const {
    if (BlockSparse()) return !BlocksOfTile(i0, i1, j0, j1).all_full;
    return mask_kind == MaskKind::kBool || documents != nullptr || !BandCovers(i0, i1, j0, j1);
  }
  // Whether the tile's scores need anything beyond s·q·k: a per-element modifier, or what may hide keys (the
  // additive mask: on partial blocks only under a block mask).
  bool TileNeedsModifiers(std::int64_t i0, std::int64_t i1, std::int64_t j0, std::int64_t j1) const {
    if (softcap > 0.0f || alibi_slope != 0.0f) return true;
    if (BlockSparse()) return !BlocksOfTile(i0, i1, j0, j1).all_full;
    return mask_kind != MaskKind::kNone || documents != nullptr || !BandCovers(i0, i1, j0, j1);
  }

  // S_ij from q_i·k_j: ModifiedScore, then the additive mask (not on a full block); −∞ where row i does not
  // see key j.
  template <typename T>
  T Score(std::int64_t i, std::int64_t j, T q_dot_k) const {
    if (!Sees(i, j)) return kNegInfOf<T>;
    T s = ModifiedScore(q_dot_k, scale, softcap, alibi_slope, std::llabs(Diagonal(i) - j));
    if (mask_kind == MaskKind::kAdditive && ClassAt(i, j) != BlockClass::kFull) {
      s += static_cast<T>(MaskBias(i, j));
    }
    return s;
  }
};

}  // namespace flashattn

#endif  // FLASHATTN_COMMON_SCORE_H_
