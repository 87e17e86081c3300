// ring_forward: every rank's queries meet every K/V shard as the shards travel the ring; each step's partial
// (O, LSE) is merged into a float32 running state per row (docs/distributed.md, "Ring forward").
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distributed/agreement.h"
#include "distributed/block.h"
#include "distributed/comm.h"
#include "distributed/ring.h"
#include "distributed/ring_plan.h"
#include "distributed/running_state.h"
#include "flashattn/distributed.h"
#include "flashattn/flashattn.h"

namespace flashattn::distributed {
void ring_forward(const RingParams& params, MPI_Comm comm_in) {
  const AttentionParams& local = params.local;
  const CallComm comm(comm_in, "ring_forward", params.timeout_seconds);
  AgreeOrThrow(comm, RingFields(local, params.seqlen, params.layout), ErrorOf([&] {
                 CheckRingShard(local, params.seqlen, params.layout, params.timeout_seconds, comm, "local.");
               }));
  AgreeOnSinks(comm, local.sinks, local.heads_q, "local.sinks");
  const int rank = comm.rank(), world = comm.size();
  const RingPlan plan(params.seqlen, world, params.layout, Band::Of(local));
  const KvShape shape = KvShape::Of(local);
  const std::int64_t rows = plan.Length(rank), heads = local.heads_q, dv = local.value_head_dim();
  const bool merge_full = !DependsOnPositions(local);
  const std::int64_t rows_per_piece = RowsPerPiece(rows);

  const std::vector<float> q = WidenShardRows(local, local.q, local.q_strides, local.head_dim);
  RunningState state(local.batch, rows, heads, dv);
  std::vector<float> block_o, block_lse, kv_scratch;
  std::shared_ptr<Bytes> shard = PackShard(local, rows);  // null while this rank holds no shard
  std::vector<RingStepTiming> timings;
  for (int step = 0; step < world; ++step) {
    const int source = plan.SourceAt(rank, step), next_source = plan.SourceAt(rank, step + 1);
    Step transfers(comm);
    std::shared_ptr<Bytes> next_shard;
    if (step + 1 < world && plan.Reaches(next_source, rank)) {
      next_shard = std::make_shared<Bytes>(static_cast<std::size_t>(shape.Bytes(plan.Length(next_source))));
      transfers.transfers.Receive(next_shard->data(), static_cast<std::int64_t>(next_shard->size()),
                                  (rank - 1 + world) % world, kKvTag, next_shard);
      transfers.bytes_received = static_cast<std::int64_t>(next_shard->size());
    }
    if (step + 1 < world && plan.Reaches(source, (rank + 1) % world)) {
      transfers.transfers.Send(shard->data(), static_cast<std::int64_t>(shard->size()), (rank + 1) % world, kKvTag,
                               shard);
    }
    if (shard != nullptr && plan.Needs(rank, source)) {
      const std::int64_t keys = plan.Length(source);
      const AttentionParams base =
          BlockBase(local, q.data(), rows, ShardAsFloats(*shard, shape, keys, kv_scratch), keys);
      for (const Block& block : plan.Blocks(rank, source, merge_full)) {
        for (const Block& piece : Pieces(plan.band(), block, rows_per_piece)) {
          AttentionParams call = LocalCall(base, plan.seqlen(), piece);
          block_o.resize(static_cast<std::size_t>(local.batch * piece.rows * heads * dv));
          block_lse.resize(static_cast<std::size_t>(local.batch * heads * piece.rows));
          call.o = block_o.data();
          call.lse = block_lse.data();
          call.o_strides = {piece.rows * heads * dv, heads * dv, dv};
          forward(call);
          state.Merge(piece.row_begin, piece.rows, block_o.data(), block_lse.data());
          transfers.Poll();
        }
      }
    }
    timings.push_back(transfers.Finish(StepTransfers(step, comm)));
    shard = std::move(next_shard);
  }
  state.JoinSinks(local.sinks);
  state.WriteTo(local);
  SetLastRingTimings(std::move(timings));
}

}  // namespace flashattn::distributed
