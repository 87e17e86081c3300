// The collective check every call makes before its first transfer: each rank describes its call in a few
// named numbers and says whether its own input is valid; one gather lets every rank see all of them, and
// every rank throws the same Error if any rank's input is invalid or the ranks disagree.
#ifndef FLASHATTN_DISTRIBUTED_AGREEMENT_H_
#define FLASHATTN_DISTRIBUTED_AGREEMENT_H_

#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include "distributed/comm.h"

namespace flashattn::distributed {

// One number of a call's description. Every rank of a call passes the same names in the same order.
struct Field {
  enum class Kind : std::uint8_t { kInteger, kFloat };
  const char* name;
  std::int64_t value;  // a float's bits when kind is kFloat
  Kind kind = Kind::kInteger;
};
Field FloatField(const char* name, float value);

// At most this many fields per call (the gathered record has a fixed size).
inline constexpr std::size_t kMaxFields = 48;

// Collective. `local_error` is empty when this rank's input is valid, else the Error message it would
// have thrown. Throws on every rank if any rank's error is non-empty or any field differs between ranks,
// naming the field and each rank's value, or quoting each failing rank's message.
void AgreeOrThrow(const CallComm& comm, std::span<const Field> fields, const std::string& local_error);

// Collective, once AgreeOrThrow has checked that every rank passes `values` of the same length: throws on
// every rank unless every rank's values are the same bits, naming the first element that differs
// (`name`[n]) and each rank's value of it. For per-head arrays (the sinks) that are too long for Fields.
void AgreeOnValues(const CallComm& comm, const char* name, std::span<const float> values);
// The same for integer arrays (cu_seqlens_q).
void AgreeOnValues(const CallComm& comm, const char* name, std::span<const std::int32_t> values);

// Collective, after the agreement on a call's fields (so every rank has sinks, or none): the attention
// sinks (heads_q floats, or null) must be the same bits on every rank. `name` names them in messages.
void AgreeOnSinks(const CallComm& comm, const float* sinks, std::int64_t heads_q, const char* name);

// Collective: every rank's `values` (the same count on every rank), rank after rank.
std::vector<std::int64_t> GatherValues(const CallComm& comm, std::span<const std::int64_t> values,
                                       std::string_view what);

// Runs `check` (which throws for invalid input) and returns its message, or "" if it passed. Any
// exception counts, so that a rank never leaves the check alone.
template <typename Check>
std::string ErrorOf(Check check) {
  try {
    check();
  } catch (const std::exception& error) {
    return error.what();
  }
  return {};
}

}  // namespace flashattn::distributed

#endif  // FLASHATTN_DISTRIBUTED_AGREEMENT_H_
