// Working memory of the kernels: taken before any output is written, so that a failed allocation leaves the
// caller's arrays untouched, from the blocks the calling thread kept from its earlier calls when one fits
// (working_memory.h).
//
// A kernel describes its per-thread working set once, as a function that takes its regions from a
// ScratchCarver in order; ScratchArena runs that function once to measure a thread's share, allocates a
// share per thread, and runs it again on a thread's share to hand out the pointers. Each region starts on a
// 64-byte boundary (one AVX-512 vector), so rows padded to whole vectors stay aligned.
#ifndef FLASHATTN_SIMD_SCRATCH_H_
#define FLASHATTN_SIMD_SCRATCH_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <new>

#include "common/constants.h"
#include "simd/working_memory.h"

namespace flashattn::simd {

inline constexpr std::int64_t kScratchAlignment = 64;  // bytes

// `count` elements of T (at least one, so that an empty array is still a valid allocation), or
// std::bad_alloc: the arrays a kernel shares between its threads.
template <typename T>
WorkingArray<T> AllocateOrThrow(std::int64_t count) {
  ReturnToCache deleter;
  const std::size_t bytes = static_cast<std::size_t>(std::max<std::int64_t>(1, count)) * sizeof(T);
  T* array = static_cast<T*>(TakeBlock(bytes, deleter.capacity));
  return WorkingArray<T>(array, deleter);
}

// Hands out consecutive regions of one thread's share (or, without a share, only counts their bytes).
class ScratchCarver {
 public:
  explicit ScratchCarver(char* share) : share_(share) {}

  // The next `count` elements of T.
  template <typename T>
  T* Take(std::int64_t count) {
    T* region = share_ == nullptr ? nullptr : reinterpret_cast<T*>(share_ + bytes_);
    bytes_ += RoundUp(count * static_cast<std::int64_t>(sizeof(T)), kScratchAlignment);
    return region;
  }
  std::int64_t Bytes() const { return bytes_; }

 private:
  char* share_;
  std::int64_t bytes_ = 0;
};

// One share per thread of the working set that `carve(ScratchCarver&)` takes.
class ScratchArena {
 public:
  template <class Carve>
  ScratchArena(std::int64_t threads, const Carve& carve) {
    ScratchCarver measure(nullptr);
    carve(measure);
    share_bytes_ = measure.Bytes();
    memory_ = AllocateOrThrow<char>(threads * share_bytes_);
  }

  // Thread t's share, as `carve` lays it out (the same function the arena was sized with).
  template <class Carve>
  auto Share(std::int64_t thread, const Carve& carve) const {
    ScratchCarver carver(memory_.get() + thread * share_bytes_);
    return carve(carver);
  }

 private:
  std::int64_t share_bytes_ = 0;
  WorkingArray<char> memory_;
};

}  // namespace flashattn::simd

#endif  // FLASHATTN_SIMD_SCRATCH_H_
