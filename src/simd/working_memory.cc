#include "simd/working_memory.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <vector>

#include "hwy/aligned_allocator.h"

// Under AddressSanitizer a block waiting in the cache is poisoned, and so is the part of a reused block
// beyond what the caller asked for: an access there is reported as if the memory had been freed. Every block
// handed out is also filled with NaN bytes there, so that a kernel reading scratch it never wrote (and
// counting on fresh memory being zero) gives visibly wrong results in the sanitizer tests.
#if defined(__SANITIZE_ADDRESS__)
#define FLASHATTN_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FLASHATTN_ASAN 1
#endif
#endif
#ifdef FLASHATTN_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace flashattn::simd {
namespace {

void Poison([[maybe_unused]] void* begin, [[maybe_unused]] std::size_t bytes) {
#ifdef FLASHATTN_ASAN
  ASAN_POISON_MEMORY_REGION(begin, bytes);
#endif
}

void Unpoison([[maybe_unused]] void* begin, [[maybe_unused]] std::size_t bytes) {
#ifdef FLASHATTN_ASAN
  ASAN_UNPOISON_MEMORY_REGION(begin, bytes);
#endif
}

struct Block {
  void* memory;
  std::size_t capacity;
};

void Free(const Block& block) {
  Unpoison(block.memory, block.capacity);
  hwy::FreeAlignedBytes(block.memory, nullptr, nullptr);
}

class BlockCache {
 public:
  BlockCache() = default;
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;
  ~BlockCache() {
    for (const Block& block : blocks_) Free(block);
  }

  // The smallest cached block of at least `bytes` that wastes at most as much as it uses, taken out of the
  // cache; {nullptr, 0} if there is none.
  Block Take(std::size_t bytes) {
    auto best = blocks_.end();
    for (auto it = blocks_.begin(); it != blocks_.end(); ++it) {
      const bool fits = it->capacity >= bytes && it->capacity / 2 <= bytes;
      if (fits && (best == blocks_.end() || it->capacity < best->capacity)) best = it;
    }
    if (best == blocks_.end()) return {nullptr, 0};
    const Block block = *best;
    retained_ -= block.capacity;
    blocks_.erase(best);
    return block;
  }

  // Keeps `block`, dropping the oldest blocks while the cache is over its limits.
  void Keep(const Block& block) {
    if (block.capacity > kRetainedBytes) {
      Free(block);
      return;
    }
    Poison(block.memory, block.capacity);
    blocks_.push_back(block);
    retained_ += block.capacity;
    while (blocks_.size() > kRetainedBlocks || retained_ > kRetainedBytes) {
      retained_ -= blocks_.front().capacity;
      Free(blocks_.front());
      blocks_.erase(blocks_.begin());
    }
  }

 private:
  std::vector<Block> blocks_;  // oldest first
  std::size_t retained_ = 0;
};

BlockCache& ThisThreadsCache() {
  thread_local BlockCache cache;
  return cache;
}

}  // namespace

void* TakeBlock(std::size_t bytes, std::size_t& capacity) {
  bytes = std::max<std::size_t>(bytes, 1);
  Block block = ThisThreadsCache().Take(bytes);
  if (block.memory == nullptr) {
    block = {hwy::AllocateAlignedBytes(bytes, nullptr, nullptr), bytes};
    if (block.memory == nullptr) throw std::bad_alloc();
  }
  Unpoison(block.memory, bytes);
#ifdef FLASHATTN_ASAN
  std::memset(block.memory, 0xFF, bytes);
#endif
  capacity = block.capacity;
  return block.memory;
}

void ReturnBlock(void* block, std::size_t capacity) noexcept {
  if (block == nullptr) return;
  try {
    ThisThreadsCache().Keep({block, capacity});
  } catch (...) {  // the cache's own vector could not grow: free the block instead
    Free({block, capacity});
  }
}

}  // namespace flashattn::simd
