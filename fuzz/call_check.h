// The checks every fuzz target makes of one drawn call, whatever its entry point: validate() and the entry
// point agree with each other and with what the drawing made invalid; a rejected call leaves its outputs as
// they were filled (kPattern); a computed one writes no byte between the elements of its output.
#ifndef FLASHATTN_FUZZ_CALL_CHECK_H_
#define FLASHATTN_FUZZ_CALL_CHECK_H_

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "flashattn/flashattn.h"
#include "fuzz_tensor.h"
#include "oracle_check.h"

namespace flashattn::fuzz {

// Whether every one of the `bytes` bytes at `data` still holds kPattern.
inline bool AllPattern(const void* data, std::size_t bytes) {
  const auto* b = static_cast<const unsigned char*>(data);
  for (std::size_t n = 0; n < bytes; ++n)
    if (b[n] != kPattern) return false;
  return true;
}

// Whether two float arrays hold the same bits (NaN included), empty ones too (memcmp must not see their
// null data()).
inline bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Runs validate(params), then `entry` (the call itself, named `entry_name`), and fails the run unless
// validate rejects exactly the calls the drawing made invalid (`invalid` says how; empty for a valid call)
// and the entry point throws exactly on the calls validate rejects. `what` describes the call. Returns
// whether the entry point threw.
template <typename Params, typename Entry>
bool CheckValidateAgreesWithCall(const Params& params, const std::string& invalid, const std::string& what,
                                 const char* entry_name, Entry&& entry) {
  std::string rejection;
  try {
    validate(params);
  } catch (const Error& error) {
    rejection = error.what();
  }
  const bool valid = rejection.empty();
  if (!invalid.empty() && valid) Fail("validate accepted a call with " + invalid);
  if (invalid.empty() && !valid) Fail(what + ": validate rejected a valid call: " + rejection);
  try {
    entry();
  } catch (const Error& error) {
    if (valid) Fail(what + ": " + entry_name + " threw on a call validate accepted: " + error.what());
    return true;
  }
  if (!valid) Fail(what + ": " + entry_name + " accepted a call validate rejected");
  return false;
}

// Fails the run if a byte of `o` that none of its elements occupies lost kPattern.
inline void CheckNothingWrittenBetweenElements(const Tensor& o, const std::string& what) {
  const std::vector<bool> addressed = AddressedBytes(o);
  for (std::size_t n = 0; n < addressed.size(); ++n) {
    if (!addressed[n] && o.bytes[n] != kPattern) Fail(what + ": wrote between the elements of O");
  }
}

}  // namespace flashattn::fuzz

#endif  // FLASHATTN_FUZZ_CALL_CHECK_H_
