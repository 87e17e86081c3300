// Where each rank's rows sit in the global sequence: the runs of consecutive positions (chunks) a shard is
// made of, in the order the rank stores them (docs/distributed.md, "Layouts").
#ifndef FLASHATTN_DISTRIBUTED_LAYOUT_H_
#define FLASHATTN_DISTRIBUTED_LAYOUT_H_

#include <cstdint>
#include <sstream>
#include <vector>

#include "flashattn/distributed.h"
#include "flashattn/flashattn.h"

namespace flashattn::distributed {

// Rows [local_start, local_start + length) of a shard are global positions [global_start, ...).
struct Chunk {
  std::int64_t global_start = 0;
  std::int64_t length = 0;
  std::int64_t local_start = 0;
};

// One chunk (contiguous) or two (zigzag: chunks r and 2W−1−r), some possibly empty.
std::vector<Chunk> ShardChunks(std::int64_t seqlen, int world_size, int rank, ShardLayout layout);

// Builds an Error message from streamable parts, like the core library's messages.
template <typename... Parts>
[[noreturn]] void Fail(const Parts&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  throw Error(message.str());
}

}  // namespace flashattn::distributed

#endif  // FLASHATTN_DISTRIBUTED_LAYOUT_H_
