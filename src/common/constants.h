// Constants and integer helpers shared by every layer.
#ifndef FLASHATTN_COMMON_CONSTANTS_H_
#define FLASHATTN_COMMON_CONSTANTS_H_

#include <cstdint>
#include <limits>

namespace flashattn {

// −∞: the score of a key a row does not see and the running maximum of a row before its first key.
template <typename T>
inline constexpr T kNegInfOf = -std::numeric_limits<T>::infinity();
inline constexpr float kNegInf = kNegInfOf<float>;

// x rounded up to a multiple of `multiple` (x ≥ 0, multiple > 0).
inline constexpr std::int64_t RoundUp(std::int64_t x, std::int64_t multiple) {
  return (x + multiple - 1) / multiple * multiple;
}

}  // namespace flashattn

#endif  // FLASHATTN_COMMON_CONSTANTS_H_
