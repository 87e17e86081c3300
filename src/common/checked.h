// Small helpers for validation: 64-bit arithmetic that reports overflow instead of wrapping, and error
// messages that name the argument.
#ifndef FLASHATTN_COMMON_CHECKED_H_
#define FLASHATTN_COMMON_CHECKED_H_

#include <cstdint>
#include <sstream>
#include <string>

#include "flashattn/flashattn.h"

namespace flashattn {

// Builds an Error message from any streamable parts: Fail("head_dim must be in [1, 512], got ", d).
template <typename... Parts>
[[noreturn]] void Fail(const Parts&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  throw Error(message.str());
}

// a·b + c, or false if the result does not fit in int64.
inline bool MulAdd(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t* result) {
  std::int64_t product;
  return !__builtin_mul_overflow(a, b, &product) && !__builtin_add_overflow(product, c, result);
}

}  // namespace flashattn

#endif  // FLASHATTN_COMMON_CHECKED_H_
