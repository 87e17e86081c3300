// Software prefetch requests of the forward and decode kernels: one line into every cache level (decode), the
// lines of a row into L2 only (forward). Plain functions, called from every SIMD target's code.
#ifndef FLASHATTN_COMMON_PREFETCH_H_
#define FLASHATTN_COMMON_PREFETCH_H_

#include <cstdint>

#include "hwy/base.h"
#include "hwy/cache_control.h"

namespace flashattn {

// Requests one 64-byte line into L2 only (x86 prefetcht1), for data wanted after L1 will have turned over.
HWY_INLINE void PrefetchLineToL2(const void* line) {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(line, /*rw=*/0, /*locality=*/2);
  // GCC finds a function that only prefetches pure and drops calls to it whose result goes unused (every
  // prefetch of decode's ScoreBlock callback vanished); an empty volatile asm that takes the address keeps it.
  asm volatile("" : : "r"(line));
#else
  hwy::Prefetch(static_cast<const char*>(line));
#endif
}

// Requests one 64-byte line into every cache level (x86 prefetcht0). Decode's requests for the next block of
// keys: on a Zen 5 the same requests into L2 only (prefetcht1) read the f16 cache of 32 query heads on 8 K/V
// heads at 3.8-6.0 ms a call instead of 3.3-3.7 ms (2 threads, 32768 keys), and slowed the same call on
// rows already in L2 by 15%; prefetchnta was as fast as prefetcht0 there.
HWY_INLINE void PrefetchLine(const void* line) {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(line, /*rw=*/0, /*locality=*/3);
  asm volatile("" : : "r"(line));  // kept, as in PrefetchLineToL2
#else
  hwy::Prefetch(static_cast<const char*>(line));
#endif
}

// Requests the lines of the `bytes` bytes at `row` into L2 only.
HWY_INLINE void PrefetchRowToL2(const void* row, std::int64_t bytes) {
  for (std::int64_t byte = 0; byte < bytes; byte += 64) PrefetchLineToL2(static_cast<const char*>(row) + byte);
}

// Requests the lines of the `bytes` bytes at `row` into L2 with the intent to write them (x86 prefetchw where
// the target has it, else a read request): an output row written later then finds its lines owned, instead of
// each store waiting for its line to be read.
HWY_INLINE void PrefetchRowForWriteToL2(void* row, std::int64_t bytes) {
  for (std::int64_t byte = 0; byte < bytes; byte += 64) {
    char* line = static_cast<char*>(row) + byte;
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(line, /*rw=*/1, /*locality=*/2);
    asm volatile("" : : "r"(line));  // kept, as in PrefetchLineToL2
#else
    hwy::Prefetch(line);
#endif
  }
}

}  // namespace flashattn

#endif  // FLASHATTN_COMMON_PREFETCH_H_
