#include "distributed/ring_plan.h"

#include <cstdint>
#include <optional>
#include <vector>

#include "distributed/block.h"
#include "distributed/layout.h"

namespace flashattn::distributed {

RingPlan::RingPlan(std::int64_t seqlen, int world_size, ShardLayout layout, const Band& band)
    : seqlen_(seqlen), band_(band), travel_(static_cast<std::size_t>(world_size), -1) {
  for (int rank = 0; rank < world_size; ++rank) chunks_.push_back(ShardChunks(seqlen, world_size, rank, layout));
}

std::int64_t RingPlan::Length(int rank) const {
  std::int64_t length = 0;
  for (const Chunk& chunk : chunks_[rank]) length += chunk.length;
  return length;
}

int RingPlan::SourceAt(int rank, int step) const { return (rank - step % world_size() + world_size()) % world_size(); }

std::vector<Block> RingPlan::Blocks(int rank, int source, bool merge_full) const {
  std::vector<Block> blocks;
  for (const Chunk& rows : chunks_[rank]) {
    for (const Chunk& keys : chunks_[source]) {
      const Block whole{rows.local_start, rows.length, rows.global_start,
                        keys.local_start, keys.length, keys.global_start};
      if (const std::optional<Block> part = VisiblePart(band_, whole)) blocks.push_back(*part);
    }
  }
  return merge_full ? MergeFullBlocks(std::move(blocks)) : blocks;
}

bool RingPlan::Needs(int rank, int source) const {
  for (const Chunk& rows : chunks_[rank])
    for (const Chunk& keys : chunks_[source])
      if (VisiblePart(band_, Block{0, rows.length, rows.global_start, 0, keys.length, keys.global_start})) return true;
  return false;
}

bool RingPlan::Reaches(int source, int rank) const {
  return rank != source && Distance(source, rank) <= Distance(source, LastHolder(source));
}

int RingPlan::LastHolder(int source) const {
  int& travel = travel_[source];
  if (travel < 0) {
    travel = 0;
    for (int distance = world_size() - 1; distance > 0; --distance) {
      if (Needs((source + distance) % world_size(), source)) {
        travel = distance;
        break;
      }
    }
  }
  return (source + travel) % world_size();
}

}  // namespace flashattn::distributed
