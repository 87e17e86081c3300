#include "distributed/layout.h"

#include <cstdint>
#include <string_view>
#include <vector>

#include "flashattn/distributed.h"

namespace flashattn::distributed {
namespace {

// ⌊part·N/parts⌋ for part ≤ parts, without forming part·N: (N mod parts)·part < parts² fits for parts < 2^31.
std::int64_t Boundary(std::int64_t seqlen, std::int64_t part, std::int64_t parts) {
  return (seqlen / parts) * part + (seqlen % parts) * part / parts;
}

void CheckShardArguments(std::int64_t seqlen, int world_size, int rank) {
  if (seqlen < 0) Fail("seqlen must be >= 0, got ", seqlen);
  if (world_size < 1) Fail("world_size must be >= 1, got ", world_size);
  if (rank < 0 || rank >= world_size) Fail("rank must be in [0, ", world_size - 1, "], got ", rank);
}

}  // namespace

std::vector<Chunk> ShardChunks(std::int64_t seqlen, int world_size, int rank, ShardLayout layout) {
  CheckShardArguments(seqlen, world_size, rank);
  auto chunk = [&](std::int64_t part, std::int64_t parts, std::int64_t local_start) {
    const std::int64_t begin = Boundary(seqlen, part, parts);
    return Chunk{begin, Boundary(seqlen, part + 1, parts) - begin, local_start};
  };
  switch (layout) {
    case ShardLayout::kContiguous:
      return {chunk(rank, world_size, 0)};
    case ShardLayout::kZigzag: {
      const std::int64_t parts = 2 * static_cast<std::int64_t>(world_size);
      const Chunk first = chunk(rank, parts, 0);
      return {first, chunk(parts - 1 - rank, parts, first.length)};
    }
  }
  Fail("layout has an unknown value ", static_cast<int>(layout));
}

std::string_view to_string(ShardLayout layout) {
  switch (layout) {
    case ShardLayout::kContiguous:
      return "contiguous";
    case ShardLayout::kZigzag:
      return "zigzag";
  }
  return "unknown";
}

ShardLayout parse_layout(std::string_view name, std::string_view argument) {
  if (name == "contiguous") return ShardLayout::kContiguous;
  if (name == "zigzag") return ShardLayout::kZigzag;
  Fail(argument, " must be \"contiguous\" or \"zigzag\", got \"", name, "\"");
}

std::int64_t shard_length(std::int64_t seqlen, int world_size, int rank, ShardLayout layout) {
  std::int64_t length = 0;
  for (const Chunk& chunk : ShardChunks(seqlen, world_size, rank, layout)) length += chunk.length;
  return length;
}

std::vector<std::int64_t> shard_indices(std::int64_t seqlen, int world_size, int rank, ShardLayout layout) {
  std::vector<std::int64_t> indices;
  for (const Chunk& chunk : ShardChunks(seqlen, world_size, rank, layout))
    for (std::int64_t i = 0; i < chunk.length; ++i) indices.push_back(chunk.global_start + i);
  return indices;
}

}  // namespace flashattn::distributed
