// The validation matrix's shared part (docs/robustness.md): every tensor of a call lives in one arena, so a test can
// check that a rejected call changed no byte the caller owns, and one routine checks a table of rejections:
// the error is a flashattn::Error, its message holds every expected part (the argument and the offending
// values), the arena is unchanged, and validate() alone gives the same message.
#ifndef FLASHATTN_TESTS_VALIDATION_MATRIX_H_
#define FLASHATTN_TESTS_VALIDATION_MATRIX_H_

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "flashattn/flashattn.h"

namespace flashattn::testing {

inline constexpr std::int64_t kTwoTo32 = std::int64_t{1} << 32;

// One buffer carved into tensors at multiples of 64 bytes; it never moves, so pointers into it stay valid.
class Arena {
 public:
  explicit Arena(std::size_t bytes) : bytes_(bytes) {}
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  template <typename T>
  T* Take(std::int64_t count) {
    used_ = (used_ + 63) / 64 * 64;
    const std::size_t size = sizeof(T) * static_cast<std::size_t>(count);
    if (used_ + size > bytes_.size()) throw std::logic_error("test arena too small");
    T* data = reinterpret_cast<T*>(bytes_.data() + used_);
    used_ += size;
    return data;
  }
  // N(0, 1) inputs.
  static void FillNormal(float* data, std::int64_t count, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal;
    for (std::int64_t n = 0; n < count; ++n) data[n] = normal(rng);
  }
  // Outputs: a byte pattern a rejected call must leave in place.
  static void FillPattern(void* data, std::int64_t bytes) {
    std::memset(data, 0xA5, static_cast<std::size_t>(bytes));
  }

  const std::vector<unsigned char>& bytes() const { return bytes_; }

 private:
  std::vector<unsigned char> bytes_;
  std::size_t used_ = 0;
};

// One row of a table: what to spoil in a valid call, and the parts its error message must contain.
template <typename Fixture>
struct Rejection {
  std::string name;
  std::function<void(Fixture&)> spoil;
  std::vector<std::string> message_parts;
};

// Calls `call` and returns the message of the flashattn::Error it throws ("" and a failure otherwise).
inline std::string ErrorMessage(const std::function<void()>& call) {
  try {
    call();
    ADD_FAILURE() << "the call was accepted";
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw something other than flashattn::Error: " << e.what();
  }
  return "";
}

// For each row: a fresh fixture, spoiled; `run` (the entry point) must throw naming the parts and write
// nothing; `validate` (the public validate() alone) must throw the same message.
template <typename Fixture>
void CheckRejections(const std::vector<Rejection<Fixture>>& table, const std::function<void(Fixture&)>& make,
                     const std::function<void(Fixture&)>& run,
                     const std::function<void(Fixture&)>& validate) {
  for (const Rejection<Fixture>& row : table) {
    SCOPED_TRACE(row.name);
    Fixture fixture;
    make(fixture);
    row.spoil(fixture);
    const std::vector<unsigned char> before = fixture.arena.bytes();
    const std::string message = ErrorMessage([&] { run(fixture); });
    for (const std::string& part : row.message_parts) {
      EXPECT_NE(message.find(part), std::string::npos) << "message lacks '" << part << "': " << message;
    }
    EXPECT_TRUE(before == fixture.arena.bytes()) << "a rejected call changed memory the caller owns";
    EXPECT_EQ(ErrorMessage([&] { validate(fixture); }), message) << "validate disagrees with the call";
  }
}

}  // namespace flashattn::testing

#endif  // FLASHATTN_TESTS_VALIDATION_MATRIX_H_
