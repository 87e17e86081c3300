// ring_backward: the K/V shards travel the ring again, each with a float32 dK/dV accumulator; every rank
// adds its queries' contribution, recomputed with the final LSE and O, and the accumulator goes home
// after the last rank that needs the shard (docs/distributed.md, "Ring backward").
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distributed/agreement.h"
#include "distributed/block.h"
#include "distributed/comm.h"
#include "distributed/element_cast.h"
#include "distributed/ring.h"
#include "distributed/ring_plan.h"
#include "flashattn/backward.h"
#include "flashattn/distributed.h"
#include "flashattn/flashattn.h"

namespace flashattn::distributed {
namespace {

using Floats = std::vector<float>;

// The forward pass's operands of this rank in float32, contiguous (batch, rows, heads, dim).
struct LocalOperands {
  Floats q, o, d_o;

  explicit LocalOperands(const BackwardParams& local)
      : q(WidenShardRows(local.attention, local.attention.q, local.attention.q_strides, local.attention.head_dim)),
        o(WidenShardRows(local.attention, local.attention.o, local.attention.o_strides, local.attention.HeadDimV())),
        d_o(WidenShardRows(local.attention, local.d_o, local.do_strides, local.attention.HeadDimV())) {}
};

// Adds `from` (batch, rows, heads, dim) into rows [row_begin, row_begin + rows) of `into` (batch, total_rows,
// heads, dim), both contiguous.
void AddRows(const float* from, std::int64_t batch, std::int64_t rows, std::int64_t heads, std::int64_t dim,
             float* into, std::int64_t row_begin, std::int64_t total_rows) {
  const std::int64_t row_elements = heads * dim;
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t i = 0; i < rows; ++i) {
      const float* in = from + (b * rows + i) * row_elements;
      float* out = into + (b * total_rows + row_begin + i) * row_elements;
      for (std::int64_t e = 0; e < row_elements; ++e) out[e] += in[e];
    }
}

// The gradients of one piece of a block, float32 and contiguous, added into the rank's dQ and the shard's
// dK/dV (K's part then V's part of `shard_grads`).
class PieceGradients {
 public:
  PieceGradients(const AttentionParams& a, const KvShape& shape) : a_(a), shape_(shape) {}

  void Compute(const AttentionParams& call, const Block& piece, const LocalOperands& operands, const float* lse) {
    const std::int64_t B = a_.batch, Hq = a_.heads_q, d = a_.head_dim, dv = a_.HeadDimV(), Hkv = a_.heads_kv;
    const std::int64_t n = piece.rows, nk = piece.keys, L = a_.seqlen_q;
    lse_.resize(static_cast<std::size_t>(B * Hq * n));
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < Hq; ++h)
        for (std::int64_t i = 0; i < n; ++i) lse_[(b * Hq + h) * n + i] = lse[(b * Hq + h) * L + piece.row_begin + i];
    dq_.resize(static_cast<std::size_t>(B * n * Hq * d));
    dk_.resize(static_cast<std::size_t>(B * nk * Hkv * d));
    dv_.resize(static_cast<std::size_t>(B * nk * Hkv * dv));
    BackwardParams params;
    params.attention = call;
    params.attention.lse = lse_.data();
    params.d_o = operands.d_o.data() + piece.row_begin * Hq * dv;
    params.do_strides = call.o_strides;
    params.dq = dq_.data();
    params.dk = dk_.data();
    params.dv = dv_.data();
    params.dq_strides = {n * Hq * d, Hq * d, d};
    params.dk_strides = {nk * Hkv * d, Hkv * d, d};
    params.dv_strides = {nk * Hkv * dv, Hkv * dv, dv};
    backward(params);
  }

  void AddTo(const Block& piece, float* dq, std::int64_t rows, float* shard_grads, std::int64_t keys) const {
    const std::int64_t B = a_.batch, Hkv = shape_.heads_kv, d = shape_.head_dim, dv = shape_.head_dim_v;
    AddRows(dq_.data(), B, piece.rows, a_.heads_q, a_.head_dim, dq, piece.row_begin, rows);
    AddRows(dk_.data(), B, piece.keys, Hkv, d, shard_grads, piece.key_begin, keys);
    AddRows(dv_.data(), B, piece.keys, Hkv, dv, shard_grads + shape_.KElements(keys), piece.key_begin, keys);
  }

 private:
  const AttentionParams& a_;
  KvShape shape_;
  Floats lse_, dq_, dk_, dv_;
};

std::shared_ptr<Floats> MakeAccumulator(const KvShape& shape, std::int64_t rows) {
  return std::make_shared<Floats>(static_cast<std::size_t>(shape.KElements(rows) + shape.VElements(rows)), 0.0f);
}

std::int64_t SizeInBytes(const Floats& floats) { return static_cast<std::int64_t>(floats.size() * sizeof(float)); }

}  // namespace

void ring_backward(const RingBackwardParams& params, MPI_Comm comm_in) {
  const BackwardParams& local = params.local;
  const AttentionParams& attention = local.attention;
  const CallComm comm(comm_in, "ring_backward", params.timeout_seconds);
  AgreeOrThrow(comm, RingFields(attention, params.seqlen, params.layout), ErrorOf([&] {
                 CheckRingShard(attention, params.seqlen, params.layout, params.timeout_seconds, comm,
                                "local.attention.");
                 Validate(local);
               }));
  const int rank = comm.rank(), world = comm.size(), previous = (rank - 1 + world) % world, next = (rank + 1) % world;
  const RingPlan plan(params.seqlen, world, params.layout, Band::Of(attention));
  const KvShape shape = KvShape::Of(attention);
  const std::int64_t rows = plan.Length(rank);
  const bool merge_full = !DependsOnPositions(attention);
  const std::int64_t rows_per_piece = RowsPerPiece(rows);

  LocalOperands operands(local);
  Floats dq(static_cast<std::size_t>(attention.batch * rows * attention.heads_q * attention.head_dim), 0.0f);
  std::shared_ptr<Floats> home = MakeAccumulator(shape, rows);  // this shard's dK, dV when complete
  Transfers home_transfer(comm);
  if (plan.LastHolder(rank) != rank) {
    home_transfer.Receive(home->data(), SizeInBytes(*home), plan.LastHolder(rank), kHomeTag, home);
  }

  PieceGradients piece_gradients(attention, shape);
  Floats kv_scratch;
  std::shared_ptr<Bytes> shard = PackShard(attention, rows);
  std::shared_ptr<Floats> incoming;  // the accumulator of the shard at hand, as the previous rank passed it on
  Transfers carried(comm);           // accumulators in flight: sent last step, or arriving for this one
  std::int64_t carried_bytes = 0;
  std::vector<RingStepTiming> timings;
  for (int step = 0; step < world; ++step) {
    const int source = plan.SourceAt(rank, step), next_source = plan.SourceAt(rank, step + 1);
    const std::int64_t keys = plan.Length(source);
    Step transfers(comm);
    transfers.transfers.Absorb(carried);
    transfers.bytes_received = carried_bytes;
    std::shared_ptr<Bytes> next_shard;
    if (step + 1 < world && plan.Reaches(next_source, rank)) {
      next_shard = std::make_shared<Bytes>(static_cast<std::size_t>(shape.Bytes(plan.Length(next_source))));
      transfers.transfers.Receive(next_shard->data(), static_cast<std::int64_t>(next_shard->size()), previous, kKvTag,
                                  next_shard);
      transfers.bytes_received += static_cast<std::int64_t>(next_shard->size());
    }
    const bool passes_on = step + 1 < world && plan.Reaches(source, next);
    if (passes_on) {
      transfers.transfers.Send(shard->data(), static_cast<std::int64_t>(shard->size()), next, kKvTag, shard);
    }

    std::shared_ptr<Floats> grads;  // this rank's contribution to the shard's dK, dV
    if (shard != nullptr && plan.Needs(rank, source)) {
      grads = MakeAccumulator(shape, keys);
      AttentionParams base = BlockBase(attention, operands.q.data(), rows, ShardAsFloats(*shard, shape, keys, kv_scratch),
                                       keys);
      base.o = operands.o.data();  // read by backward, never written
      base.o_strides = {rows * attention.heads_q * attention.HeadDimV(), attention.heads_q * attention.HeadDimV(),
                        attention.HeadDimV()};
      for (const Block& block : plan.Blocks(rank, source, merge_full)) {
        for (const Block& piece : Pieces(plan.band(), block, rows_per_piece)) {
          piece_gradients.Compute(LocalCall(base, plan.band(), piece), piece, operands, attention.lse);
          piece_gradients.AddTo(piece, dq.data(), rows, grads->data(), keys);
          transfers.Poll();
        }
      }
    }
    timings.push_back(transfers.Finish(StepTransfers(step, comm)));

    // The shard's accumulator: what came from the previous rank, plus this rank's part, in that order.
    if (shard != nullptr) {
      std::shared_ptr<Floats> accumulator = incoming != nullptr ? incoming : grads;
      if (accumulator == nullptr) accumulator = MakeAccumulator(shape, keys);
      if (incoming != nullptr && grads != nullptr)
        for (std::size_t e = 0; e < accumulator->size(); ++e) (*accumulator)[e] += (*grads)[e];
      if (passes_on) {
        carried.Send(accumulator->data(), SizeInBytes(*accumulator), next, kAccumulatorTag, accumulator);
      } else if (source != rank) {
        carried.Send(accumulator->data(), SizeInBytes(*accumulator), source, kHomeTag, accumulator);
      } else {
        home = accumulator;
      }
    }
    incoming = nullptr;
    carried_bytes = 0;
    if (next_shard != nullptr) {
      incoming = MakeAccumulator(shape, plan.Length(next_source));
      carried.Receive(incoming->data(), SizeInBytes(*incoming), previous, kAccumulatorTag, incoming);
      carried_bytes = SizeInBytes(*incoming);
    }
    shard = std::move(next_shard);
  }
  // The last accumulators sent, and this shard's coming home (sent after the last step's compute).
  const Clock::time_point last_wait = Clock::now();
  carried.Absorb(home_transfer);
  carried.Wait("the dK/dV of this rank's shard and the other ranks to receive theirs");
  timings.back().wait_seconds += SecondsBetween(last_wait, Clock::now());

  const std::int64_t dv = attention.HeadDimV();
  NarrowInto(dq.data(), attention.dtype, local.dq_strides, attention.batch, rows, attention.heads_q, attention.head_dim,
             local.dq);
  NarrowInto(home->data(), attention.dtype, local.dk_strides, attention.batch, rows, shape.heads_kv, shape.head_dim,
             local.dk);
  NarrowInto(home->data() + shape.KElements(rows), attention.dtype, local.dv_strides, attention.batch, rows,
             shape.heads_kv, dv, local.dv);
  SetLastRingTimings(std::move(timings));
}

}  // namespace flashattn::distributed
