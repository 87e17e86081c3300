// Turns libFuzzer's bytes into choices: each choice consumes bytes from the front, and an exhausted input
// reads as zeros, so every byte string (even the empty one) decodes to some call. Small, local changes
// to the bytes give small changes to the call, which is what lets coverage guidance climb.
#ifndef FLASHATTN_FUZZ_FUZZ_INPUT_H_
#define FLASHATTN_FUZZ_FUZZ_INPUT_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace flashattn::fuzz {

class FuzzInput {
 public:
  FuzzInput(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  std::uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  bool Bool() { return Byte() & 1; }
  // True with probability about 1/n.
  bool OneIn(int n) { return Byte() % n == 0; }
  // An integer in [lo, hi] (lo ≤ hi, range below 2^16): one byte for small ranges, two otherwise.
  std::int64_t Range(std::int64_t lo, std::int64_t hi) {
    const std::int64_t span = hi - lo + 1;
    const std::int64_t raw = span <= 256 ? Byte() : (Byte() | (Byte() << 8));
    return lo + raw % span;
  }
  std::uint64_t U64() {
    std::uint64_t value = 0;
    for (int i = 0; i < 8; ++i) value = (value << 8) | Byte();
    return value;
  }
  template <typename T>
  T Pick(std::initializer_list<T> values) {
    return values.begin()[Range(0, static_cast<std::int64_t>(values.size()) - 1)];
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

// SplitMix64: tensor contents come from a seed, so that a byte string describes the call, not the data.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t Next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1).
  float Symmetric() { return static_cast<float>(static_cast<double>(Next() >> 11) * 0x1p-52 - 1.0); }
  float Uniform() { return static_cast<float>(static_cast<double>(Next() >> 11) * 0x1p-53); }

 private:
  std::uint64_t state_;
};

}  // namespace flashattn::fuzz

#endif  // FLASHATTN_FUZZ_FUZZ_INPUT_H_
