// The scores of decode (SPEC §5), shared by the kernel and the reference decode. Query rows are identified
// by their diagonal: query row i of a sequence with Nk keys and Nq queries has diagonal i + Nk − Nq, the
// key position it is aligned with (the new queries are the last rows).
#ifndef FLASHATTN_DECODE_SCORE_H_
#define FLASHATTN_DECODE_SCORE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "common/window.h"
#include "flashattn/decode.h"

namespace flashattn::decoding {


struct ScoreMods {
  float scale = 1.0f;    // s
  float softcap = 0.0f;  // c; 0 = off
  std::int64_t left = kUnboundedReach, right = kUnboundedReach;  // window reach around the diagonal

  static ScoreMods From(const DecodeParams& p) {
    ScoreMods mods;
    mods.scale = p.scale.value_or(1.0f / std::sqrt(static_cast<float>(p.head_dim)));
    mods.softcap = p.softcap;
    const WindowReach reach = WindowReachOf(p.causal, p.window_left, p.window_right);
    mods.left = reach.left;
    mods.right = reach.right;
    return mods;
  }

  // Whether the row on `diagonal` sees key j: diagonal − left ≤ j ≤ diagonal + right.
  bool Visible(std::int64_t diagonal, std::int64_t j) const { return j >= diagonal - left && j <= diagonal + right; }

  // S_ij = s·q·k, then c·tanh(S/c), then −slope·|diagonal − j|; −∞ where the key is not visible.
  template <typename T>
  T Score(std::int64_t diagonal, std::int64_t j, float slope, T q_dot_k) const {
    if (!Visible(diagonal, j)) return -std::numeric_limits<T>::infinity();
    T s = static_cast<T>(scale) * q_dot_k;
    if (softcap > 0) s = static_cast<T>(softcap) * std::tanh(s / static_cast<T>(softcap));
    if (slope != 0) s -= static_cast<T>(slope) * static_cast<T>(std::llabs(diagonal - j));
    return s;
  }

  // Keys [begin, end) that some row with a diagonal in [diag_min, diag_max] may see, within [0, Nk).
  void VisibleRange(std::int64_t diag_min, std::int64_t diag_max, std::int64_t Nk, std::int64_t* begin,
                    std::int64_t* end) const {
    *begin = std::clamp<std::int64_t>(diag_min - left, 0, Nk);
    *end = std::clamp<std::int64_t>(diag_max + right + 1, 0, Nk);
    if (*end < *begin) *end = *begin;
  }
};

// Rotary embedding of x[0, rotary_dim) at one position (cos, sin: that position's rows of rotary_dim/2):
// each pair (x0, x1) with angle c becomes (x0·cos_c − x1·sin_c, x0·sin_c + x1·cos_c). The pairs are
// (x[2c], x[2c+1]) when interleaved (GPT-J), (x[c], x[c + rotary_dim/2]) otherwise (GPT-NeoX).
inline void ApplyRotary(float* x, std::int64_t rotary_dim, const float* cos, const float* sin, bool interleaved) {
  const std::int64_t half = rotary_dim / 2;
  for (std::int64_t c = 0; c < half; ++c) {
    float& x0 = interleaved ? x[2 * c] : x[c];
    float& x1 = interleaved ? x[2 * c + 1] : x[c + half];
    const float a = x0, b = x1;
    x0 = a * cos[c] - b * sin[c];
    x1 = a * sin[c] + b * cos[c];
  }
}

}  // namespace flashattn::decoding

#endif  // FLASHATTN_DECODE_SCORE_H_
