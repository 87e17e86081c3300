// The causal/sliding-window band of SPEC §5 as two reaches around each row's diagonal, shared by every
// algorithm so that they agree on it: row i (diagonal i + Nk − Nq) sees keys
// [diagonal − left, diagonal + right].
#ifndef FLASHATTN_COMMON_WINDOW_H_
#define FLASHATTN_COMMON_WINDOW_H_

#include <algorithm>
#include <cstdint>

namespace flashattn {

// Far beyond any position, and safe to add to one: a reach of −1 (unbounded) becomes this, and any larger
// reach is clamped to it, since it sees the same keys and diagonal ± reach would overflow.
inline constexpr std::int64_t kUnboundedReach = INT64_MAX / 4;

struct WindowReach {
  std::int64_t left;
  std::int64_t right;
};

// Causal is the window (left, 0), as in flash-attn.
inline WindowReach WindowReachOf(bool causal, std::int64_t window_left, std::int64_t window_right) {
  auto reach = [](std::int64_t w) { return w < 0 ? kUnboundedReach : std::min(w, kUnboundedReach); };
  return {reach(window_left), causal ? 0 : reach(window_right)};
}

}  // namespace flashattn

#endif  // FLASHATTN_COMMON_WINDOW_H_
