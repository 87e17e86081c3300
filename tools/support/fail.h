// Errors of the programs (cli/, bench/): a flashattn::Error whose message names the argument and the
// offending values, built from any streamable parts, as the library builds its own.
#ifndef FLASHATTN_TOOLS_SUPPORT_FAIL_H_
#define FLASHATTN_TOOLS_SUPPORT_FAIL_H_

#include <sstream>

#include "flashattn/flashattn.h"

namespace flashattn::support {

// Fail("--threads must be >= 0, got ", threads) throws Error("--threads must be >= 0, got -1").
template <typename... Parts>
[[noreturn]] void Fail(const Parts&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  throw Error(message.str());
}

}  // namespace flashattn::support

#endif  // FLASHATTN_TOOLS_SUPPORT_FAIL_H_
