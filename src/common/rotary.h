// Rotary position embedding of one row, shared by decode's append and query gathering and by the reference
// decode.
#ifndef FLASHATTN_COMMON_ROTARY_H_
#define FLASHATTN_COMMON_ROTARY_H_

#include <cstdint>

namespace flashattn {

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

}  // namespace flashattn

#endif  // FLASHATTN_COMMON_ROTARY_H_
