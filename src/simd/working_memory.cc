#include "simd/working_memory.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "flashattn/working_memory.h"

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

// The bytes each thread may keep: set_working_memory_limit's.
std::atomic<std::size_t> retained_bytes_limit{kDefaultWorkingMemoryLimit};

// One thread's kept blocks. Its own thread takes and keeps them; any thread may trim them (the caller's limit
// and release), so each cache has a lock, which its own thread finds free unless such a call runs.
class BlockCache {
 public:
  BlockCache();
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;
  ~BlockCache();

  // The smallest cached block of at least `bytes` that wastes at most as much as it uses, taken out of the
  // cache; {nullptr, 0} if there is none.
  Block Take(std::size_t bytes) {
    const std::lock_guard<std::mutex> lock(mutex_);
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
    const std::size_t limit = retained_bytes_limit.load(std::memory_order_relaxed);
    if (block.capacity > limit) {
      Free(block);
      return;
    }
    Poison(block.memory, block.capacity);
    const std::lock_guard<std::mutex> lock(mutex_);
    blocks_.push_back(block);
    retained_ += block.capacity;
    TrimLocked(limit);
  }

  void TrimTo(std::size_t limit) {
    const std::lock_guard<std::mutex> lock(mutex_);
    TrimLocked(limit);
  }

  std::size_t Retained() {
    const std::lock_guard<std::mutex> lock(mutex_);
    return retained_;
  }

 private:
  void TrimLocked(std::size_t limit) {
    while (!blocks_.empty() && (blocks_.size() > kRetainedBlocks || retained_ > limit)) {
      retained_ -= blocks_.front().capacity;
      Free(blocks_.front());
      blocks_.erase(blocks_.begin());
    }
  }

  std::mutex mutex_;
  std::vector<Block> blocks_;  // oldest first
  std::size_t retained_ = 0;
};

// Every living thread's cache, for the calls that reach them all. Its lock is taken before a cache's.
class CacheRegistry {
 public:
  void Add(BlockCache* cache) {
    const std::lock_guard<std::mutex> lock(mutex_);
    caches_.push_back(cache);
  }
  void Remove(BlockCache* cache) {
    const std::lock_guard<std::mutex> lock(mutex_);
    caches_.erase(std::find(caches_.begin(), caches_.end(), cache));
  }
  template <class Visit>
  void ForEach(const Visit& visit) {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (BlockCache* cache : caches_) visit(*cache);
  }

 private:
  std::mutex mutex_;
  std::vector<BlockCache*> caches_;
};

// Never destroyed: a thread may end, and unregister its cache, after the static objects are gone.
CacheRegistry& Registry() {
  static CacheRegistry* const registry = new CacheRegistry;
  return *registry;
}

BlockCache::BlockCache() { Registry().Add(this); }

BlockCache::~BlockCache() {
  Registry().Remove(this);
  TrimTo(0);
}

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

namespace flashattn {

void set_working_memory_limit(std::size_t bytes_per_thread) {
  simd::retained_bytes_limit.store(bytes_per_thread, std::memory_order_relaxed);
  simd::Registry().ForEach([bytes_per_thread](simd::BlockCache& cache) { cache.TrimTo(bytes_per_thread); });
}

std::size_t working_memory_limit() { return simd::retained_bytes_limit.load(std::memory_order_relaxed); }

void release_working_memory() {
  simd::Registry().ForEach([](simd::BlockCache& cache) { cache.TrimTo(0); });
}

std::size_t retained_working_memory() {
  std::size_t total = 0;
  simd::Registry().ForEach([&total](simd::BlockCache& cache) { total += cache.Retained(); });
  return total;
}

}  // namespace flashattn
