// The indexer's ranking and its running top-k (plain C++). A candidate key is one 64-bit integer whose order is
// the ranking: its score's order above (higher first; a NaN below every number, −inf included; −0 and +0 equal),
// then its position reversed (lower first). So a row's top k are the k largest integers whatever order the
// keys come in, which makes the result independent of how the keys are split among threads.
#ifndef FLASHATTN_INDEXER_TOP_K_H_
#define FLASHATTN_INDEXER_TOP_K_H_

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>

namespace flashattn::indexer_kernel {

// A float's place in the ranking as an unsigned integer: 0 for every NaN, then −inf … +inf in order.
inline std::uint32_t OrderedScore(float score) {
  if (std::isnan(score)) return 0;
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(score + 0.0f);  // −0 + 0 = +0
  return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

inline float ScoreOf(std::uint64_t key) {
  const auto ordered = static_cast<std::uint32_t>(key >> 32);
  if (ordered == 0) return std::numeric_limits<float>::quiet_NaN();
  return std::bit_cast<float>((ordered & 0x80000000u) ? ordered & 0x7fffffffu : ~ordered);
}

inline std::uint64_t CandidateKey(float score, std::int32_t position) {
  return (std::uint64_t{OrderedScore(score)} << 32) | (0xffffffffu - static_cast<std::uint32_t>(position));
}

inline std::int32_t PositionOf(std::uint64_t key) {
  return static_cast<std::int32_t>(0xffffffffu - static_cast<std::uint32_t>(key));
}

// The best k of n candidate keys, best first, at their start; returns how many there are (min(k, n)).
inline std::int64_t SortBest(std::uint64_t* keys, std::int64_t n, std::int64_t k) {
  if (n > k) std::nth_element(keys, keys + (k - 1), keys + n, std::greater<>());
  const std::int64_t kept = std::min(n, k);
  std::sort(keys, keys + kept, std::greater<>());
  return kept;
}

// Keeps the best k of the keys offered to it, in a buffer of `capacity` ≥ k + the largest block offered at once.
// Candidates are appended until the buffer could overflow; then it keeps its best k (a partial selection) and
// from then on admits only keys that beat the k-th, whose score is the threshold a block's scores are tested
// against before any is offered.
class RunningTopK {
 public:
  RunningTopK(std::uint64_t* buffer, std::int64_t k, std::int64_t capacity)
      : buffer_(buffer), k_(k), capacity_(capacity) {}

  // Before a block of up to n keys: room for all of them.
  void MakeRoom(std::int64_t n) {
    if (count_ + n > capacity_) KeepBest();
  }

  // No key with a lower score can enter; −inf while every key can (or the k-th is a NaN).
  float Threshold() const {
    const float kth = ScoreOf(kth_);
    return selective_ && !std::isnan(kth) ? kth : -std::numeric_limits<float>::infinity();
  }

  void Offer(float score, std::int32_t position) {
    const std::uint64_t key = CandidateKey(score, position);
    if (!selective_ || key > kth_) buffer_[count_++] = key;
  }

  // The best min(k, offered) keys, in no particular order, at the buffer's start; returns their count.
  std::int64_t Finish() {
    if (count_ > k_) KeepBest();
    return count_;
  }

 private:
  void KeepBest() {
    std::nth_element(buffer_, buffer_ + (k_ - 1), buffer_ + count_, std::greater<>());
    count_ = k_;
    kth_ = buffer_[k_ - 1];
    selective_ = true;
  }

  std::uint64_t* buffer_;
  std::int64_t k_, capacity_;
  std::int64_t count_ = 0;
  std::uint64_t kth_ = 0;
  bool selective_ = false;
};

}  // namespace flashattn::indexer_kernel

#endif  // FLASHATTN_INDEXER_TOP_K_H_
