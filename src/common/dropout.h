// Dropout regenerated, never stored (docs/backward.md): a counter-based generator maps the identity of an element of P
// to its keep/drop decision, so the forward and backward passes, any thread and any tile order agree.
//
// Philox-4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3", SC'11): a keyed bijection
// of 128-bit counters, ten rounds of
//   (c0, c1, c2, c3) ← (hi(M1·c2) ⊕ c1 ⊕ k0,  lo(M1·c2),  hi(M0·c0) ⊕ c3 ⊕ k1,  lo(M0·c0))
// with the key bumped by the Weyl constants (W0, W1) between rounds.
//
// Element (b, h, i, j) of a call with Hq heads, Nq rows and Nk keys takes output word j mod 4 of the counter
//   c = (n mod 2³², n div 2³², offset mod 2³², offset div 2³²),  n = ((b·Hq + h)·Nq + i)·⌈Nk/4⌉ + ⌊j/4⌋
// under key (seed mod 2³², seed div 2³²). It is dropped iff that word < ⌊p·2³²⌋; a kept element's P is multiplied by
// 1/(1 − p). Different offsets use disjoint counters. A call that is one block of a larger problem
// (BlockPlacement) takes that problem's decisions: its element (b, h, i, j) is the problem's
// (b, h, query_start + i, key_start + j), with Nq and Nk the problem's totals.
#ifndef FLASHATTN_COMMON_DROPOUT_H_
#define FLASHATTN_COMMON_DROPOUT_H_

#include <array>
#include <cstdint>

#include "common/score.h"
#include "flashattn/flashattn.h"

namespace flashattn {

inline std::array<std::uint32_t, 4> Philox4x32_10(std::array<std::uint32_t, 4> c,
                                                  std::array<std::uint32_t, 2> k) {
  constexpr std::uint64_t M0 = 0xD2511F53, M1 = 0xCD9E8D57;
  constexpr std::uint32_t W0 = 0x9E3779B9, W1 = 0xBB67AE85;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) k[0] += W0, k[1] += W1;
    const std::uint64_t p0 = M0 * c[0], p1 = M1 * c[2];
    c = {static_cast<std::uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<std::uint32_t>(p1),
         static_cast<std::uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<std::uint32_t>(p0)};
  }
  return c;
}

// The dropout of one call: keep decisions and the multiplier Z_ij = keep_ij / (1 − p) of every element.
class Dropout {
 public:
  explicit Dropout(const AttentionParams& params);

  bool Active() const { return threshold_ > 0; }
  float KeptScale() const { return kept_scale_; }  // 1/(1 − p)

  bool Keep(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    const std::int64_t key = key_start_ + j;
    return Word(Block(b, h, i) + key / 4, key % 4) >= threshold_;
  }
  // Z_ij: 1/(1 − p) if kept, 0 if dropped; 1 when dropout is off.
  float Multiplier(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return !Active() ? 1.0f : (Keep(b, h, i, j) ? kept_scale_ : 0.0f);
  }
  // Z for keys [j0, j0 + n) of row i of (b, h), four keys of the problem per generator call.
  void RowMultipliers(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0, std::int64_t n,
                      float* Z) const;

 private:
  Dropout(const AttentionParams& params, const BlockPlacement& placement);

  std::uint64_t Block(std::int64_t b, std::int64_t h, std::int64_t i) const {
    return ((static_cast<std::uint64_t>(b) * Hq_ + h) * Nq_ + query_start_ + i) * blocks_per_row_;
  }
  std::uint32_t Word(std::uint64_t n, std::int64_t lane) const {
    return Philox4x32_10(
        {static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(n >> 32), offset_lo_, offset_hi_},
        key_)[lane];
  }

  std::uint64_t Hq_, Nq_, blocks_per_row_;  // Nq and ⌈Nk/4⌉ of the whole problem
  std::int64_t query_start_, key_start_;     // the call's row 0 and key 0 in it
  std::uint32_t offset_lo_, offset_hi_;
  std::array<std::uint32_t, 2> key_;
  std::uint64_t threshold_;  // ⌊p·2³²⌋: words below it drop their element
  float kept_scale_;
};

}  // namespace flashattn

#endif  // FLASHATTN_COMMON_DROPOUT_H_
