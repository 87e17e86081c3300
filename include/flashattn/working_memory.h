// The kernels' working memory that calling threads keep between calls, and the caller's control of it.
//
// A call takes the working memory it needs (packed K and V, each thread's tiles: up to tens of MiB for long
// sequences) before it writes anything, and gives it back when it returns. The thread that made the call
// keeps what it gives back for its next call, because memory handed back to malloc is returned to the system
// and page-faulted in again by the next call of a similar size. Each calling thread keeps at most
// working_memory_limit() bytes, in at most 8 blocks, and frees them when it ends. So a process whose T
// threads call the library keeps at most T · working_memory_limit() bytes between calls: a server with many
// calling threads bounds that total with set_working_memory_limit (0 keeps nothing: every call allocates
// afresh), and frees it all at once with release_working_memory. Every function here is thread-safe.
#ifndef FLASHATTN_WORKING_MEMORY_H_
#define FLASHATTN_WORKING_MEMORY_H_

#include <cstddef>

#include "flashattn/export.h"

namespace flashattn {

// The limit of a process that never sets one: 64 MiB per calling thread.
inline constexpr std::size_t kDefaultWorkingMemoryLimit = std::size_t{64} << 20;

// Sets the bytes each calling thread may keep between calls (one value for the whole process) and trims
// every thread's kept memory to it at once, freeing the oldest blocks first. Memory in use by a running
// call is not kept memory: it is trimmed when that call gives it back.
FLASHATTN_API void set_working_memory_limit(std::size_t bytes_per_thread);
FLASHATTN_API std::size_t working_memory_limit();

// Frees the memory every thread keeps (the limit stays): the next call of each thread allocates afresh.
FLASHATTN_API void release_working_memory();

// The bytes all threads keep now, together.
FLASHATTN_API std::size_t retained_working_memory();

}  // namespace flashattn

#endif  // FLASHATTN_WORKING_MEMORY_H_
