// Kernel working memory that the calling thread keeps between calls.
//
// A forward pass needs up to 16 MiB of packed K and V plus each thread's tiles. Handing such blocks back to
// malloc after every call lets glibc return them to the system (it trims the top of the heap, or unmaps a
// block above its mmap threshold), so the next call page-faults its way through the same megabytes again.
// Instead a finished call returns its blocks to a small cache owned by the calling thread, and the next call
// of a similar size takes them from there. The cache holds at most kRetainedBlocks blocks and the caller's
// limit of bytes per thread (include/flashattn/working_memory.h, which working_memory.cc implements) and is
// freed when the thread ends.
#ifndef FLASHATTN_SIMD_WORKING_MEMORY_H_
#define FLASHATTN_SIMD_WORKING_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <memory>

namespace flashattn::simd {

inline constexpr std::size_t kRetainedBlocks = 8;

// At least `bytes` bytes, 64-byte aligned, from this thread's cache or newly allocated (std::bad_alloc if
// that fails). `capacity` receives the block's real size, which ReturnBlock needs.
void* TakeBlock(std::size_t bytes, std::size_t& capacity);
// Gives a block back to the calling thread's cache (or frees it, if the cache is full or it is too big).
void ReturnBlock(void* block, std::size_t capacity) noexcept;

// Returns its block to the cache of the thread that destroys it.
struct ReturnToCache {
  std::size_t capacity = 0;
  void operator()(void* block) const noexcept { ReturnBlock(block, capacity); }
};

template <typename T>
using WorkingArray = std::unique_ptr<T[], ReturnToCache>;

}  // namespace flashattn::simd

#endif  // FLASHATTN_SIMD_WORKING_MEMORY_H_
