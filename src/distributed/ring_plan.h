// The ring's schedule, the same on every rank: at step s rank r holds the K/V shard of rank r − s (mod W);
// which blocks it computes against it, and which transfers the mask makes unnecessary.
#ifndef FLASHATTN_DISTRIBUTED_RING_PLAN_H_
#define FLASHATTN_DISTRIBUTED_RING_PLAN_H_

#include <cstdint>
#include <vector>

#include "distributed/block.h"
#include "distributed/layout.h"
#include "flashattn/distributed.h"

namespace flashattn::distributed {

class RingPlan {
 public:
  RingPlan(std::int64_t seqlen, int world_size, ShardLayout layout, const Band& band);

  int world_size() const { return static_cast<int>(chunks_.size()); }
  std::int64_t seqlen() const { return seqlen_; }
  const Band& band() const { return band_; }
  std::int64_t Length(int rank) const;
  // The rank whose shard `rank` holds at `step`.
  int SourceAt(int rank, int step) const;

  // The blocks `rank` computes against the shard of `source` (rows of its own shard, keys of the source's),
  // each trimmed to its visible part; merged into fewer calls when `merge_full` (no position-dependent
  // modifier).
  std::vector<Block> Blocks(int rank, int source, bool merge_full) const;
  // Some row of `rank` sees some key of `source`.
  bool Needs(int rank, int source) const;
  // The shard of `source` is sent on into `rank` (≠ source): `rank` or a rank after it, before the ring
  // returns to `source`, needs it. Once false along the ring, false for the rest of it.
  bool Reaches(int source, int rank) const;
  // The last rank along the ring from `source` that receives its shard (`source` if the shard never leaves):
  // the backward pass's dK/dV of `source` are complete there and go home from it.
  int LastHolder(int source) const;

 private:
  int Distance(int from, int to) const { return (to - from + world_size()) % world_size(); }

  std::vector<std::vector<Chunk>> chunks_;  // per rank
  std::int64_t seqlen_;
  Band band_;
  // Per source: how far along the ring its shard travels (the distance to the last rank that needs it),
  // or −1 while not computed yet.
  mutable std::vector<int> travel_;
};

}  // namespace flashattn::distributed

#endif  // FLASHATTN_DISTRIBUTED_RING_PLAN_H_
