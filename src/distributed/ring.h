// What ring_forward and ring_backward share: the check of a call, the K/V shards that travel, the float32
// view of a block's operands, and the record of the steps' timings.
#ifndef FLASHATTN_DISTRIBUTED_RING_H_
#define FLASHATTN_DISTRIBUTED_RING_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "distributed/agreement.h"
#include "distributed/comm.h"
#include "distributed/ring_plan.h"
#include "flashattn/distributed.h"
#include "flashattn/flashattn.h"

namespace flashattn::distributed {

// Message tags of the ring: the K/V shards, the travelling dK/dV accumulators, and their last trip home.
inline constexpr int kKvTag = 1;
inline constexpr int kAccumulatorTag = 2;
inline constexpr int kHomeTag = 3;

// The numbers every rank of a ring call must agree on.
std::vector<Field> RingFields(const AttentionParams& local, std::int64_t seqlen, ShardLayout layout);

// Throws Error unless `local` is a valid shard of the sequence for `rank`. `names` prefixes the local
// parameters' names in messages ("local." or "local.attention.").
void CheckRingShard(const AttentionParams& local, std::int64_t seqlen, ShardLayout layout, double timeout_seconds,
                    const CallComm& comm, const char* names);

// The modifiers whose values depend on positions, not only on which pairs are visible.
bool DependsOnPositions(const AttentionParams& params);

// The element sizes of the shard arrays (batch, rows, heads, dim) that travel: K then V, in the element type.
struct KvShape {
  std::int64_t batch = 0, heads_kv = 0, head_dim = 0, head_dim_v = 0;
  DType dtype = DType::kF32;
  std::int64_t KElements(std::int64_t rows) const { return batch * rows * heads_kv * head_dim; }
  std::int64_t VElements(std::int64_t rows) const { return batch * rows * heads_kv * head_dim_v; }
  std::int64_t Bytes(std::int64_t rows) const {
    return (KElements(rows) + VElements(rows)) * static_cast<std::int64_t>(size_of(dtype));
  }
  static KvShape Of(const AttentionParams& params);
};

using Bytes = std::vector<std::byte>;

// This rank's K and V (strided, in the caller's memory), packed K-then-V into one contiguous buffer.
std::shared_ptr<Bytes> PackShard(const AttentionParams& local, std::int64_t rows);

// A packed shard as float32 K and V: the buffer itself for float32, else a widened copy in `scratch`.
struct KvFloats {
  const float* k = nullptr;
  const float* v = nullptr;
};
KvFloats ShardAsFloats(const Bytes& shard, const KvShape& shape, std::int64_t rows, std::vector<float>& scratch);

// A (batch, rows, Hq, dim) tensor of the shard (q, o or dO: strided, of local.dtype) as contiguous float32.
std::vector<float> WidenShardRows(const AttentionParams& local, const void* data, const Strides& strides,
                                  std::int64_t dim);

// The call over the whole local query buffer (float32, contiguous (batch, rows, Hq, d)) against a shard's
// K/V (float32, contiguous): what LocalCall cuts blocks from. Its o and lse are left for the caller.
AttentionParams BlockBase(const AttentionParams& local, const float* q, std::int64_t rows, const KvFloats& kv,
                          std::int64_t keys);

// Query rows per kernel call, so that the ring polls its transfers several times per step.
std::int64_t RowsPerPiece(std::int64_t rows);

// One ring step's transfers and its timing: started when the step posts its transfers, polled between
// pieces of compute, finished by waiting for what is still pending.
class Step {
 public:
  explicit Step(const CallComm& comm) : transfers(comm), start_(Clock::now()) {}
  Transfers transfers;
  std::int64_t bytes_received = 0;

  // Progresses the transfers; remembers when they were first seen complete.
  void Poll();
  // After the step's compute: waits for the transfers (Error naming `what` on timeout) and returns the
  // step's timing.
  RingStepTiming Finish(std::string_view what);

 private:
  void NotePosted();

  Clock::time_point start_;
  std::optional<bool> posted_;  // whether the step had any transfer, known at the first poll
  std::optional<Clock::time_point> transfers_done_;
};

// Names a step's transfers in a timeout Error.
std::string StepTransfers(int step, const CallComm& comm);

void SetLastRingTimings(std::vector<RingStepTiming> timings);

}  // namespace flashattn::distributed

#endif  // FLASHATTN_DISTRIBUTED_RING_H_
