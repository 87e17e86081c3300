// ring_backward: the K/V shards travel the ring again, each with a float32 dK/dV accumulator; every rank
// adds its queries' contribution, recomputed with the final LSE and O, and the accumulator goes home
// after the last rank that needs the shard (docs/distributed.md, "Ring backward").
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/score.h"
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
        o(WidenShardRows(local.attention, local.attention.o, local.attention.o_strides, local.attention.value_head_dim())),
        d_o(WidenShardRows(local.attention, local.d_o, local.do_strides, local.attention.value_head_dim())) {}
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
    const std::int64_t B = a_.batch, Hq = a_.heads_q, d = a_.head_dim, dv = a_.value_head_dim(), Hkv = a_.heads_kv;
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

// One rank's part of the ring backward pass, step by step.
class BackwardRing {
 public:
  BackwardRing(const RingBackwardParams& params, const CallComm& comm)
      : local_(params.local),
        a_(params.local.attention),
        comm_(comm),
        plan_(params.seqlen, comm.size(), params.layout, Band::Of(a_)),
        shape_(KvShape::Of(a_)),
        rows_(plan_.Length(comm.rank())),
        rows_per_piece_(RowsPerPiece(rows_)),
        operands_(local_),
        dq_(static_cast<std::size_t>(a_.batch * rows_ * a_.heads_q * a_.head_dim), 0.0f),
        home_(MakeAccumulator(shape_, rows_)),
        home_transfer_(comm),
        carried_(comm),
        piece_gradients_(a_, shape_) {}

  void Run() {
    const int rank = comm_.rank(), world = comm_.size();
    if (plan_.LastHolder(rank) != rank) {
      home_transfer_.Receive(home_->data(), SizeInBytes(*home_), plan_.LastHolder(rank), kHomeTag, home_);
    }
    std::shared_ptr<Bytes> shard = PackShard(a_, rows_);  // null while this rank holds no shard
    for (int step = 0; step < world; ++step) {
      const int source = plan_.SourceAt(rank, step), next_source = plan_.SourceAt(rank, step + 1);
      Step transfers(comm_);
      transfers.transfers.Absorb(carried_);  // the accumulator of `source` arriving, last step's sends
      transfers.bytes_received = carried_bytes_;
      std::shared_ptr<Bytes> next_shard;
      if (step + 1 < world && plan_.Reaches(next_source, rank)) {
        next_shard = std::make_shared<Bytes>(static_cast<std::size_t>(shape_.Bytes(plan_.Length(next_source))));
        transfers.transfers.Receive(next_shard->data(), static_cast<std::int64_t>(next_shard->size()), Previous(),
                                    kKvTag, next_shard);
        transfers.bytes_received += static_cast<std::int64_t>(next_shard->size());
      }
      const bool passes_on = step + 1 < world && plan_.Reaches(source, Next());
      if (passes_on) {
        transfers.transfers.Send(shard->data(), static_cast<std::int64_t>(shard->size()), Next(), kKvTag, shard);
      }
      std::shared_ptr<Floats> contribution;
      if (shard != nullptr && plan_.Needs(rank, source)) contribution = Contribution(source, *shard, transfers);
      timings_.push_back(transfers.Finish(StepTransfers(step, comm_)));
      if (shard != nullptr) PassOn(source, passes_on, contribution);
      PostAccumulatorReceive(next_shard != nullptr ? next_source : -1);
      shard = std::move(next_shard);
    }
    // The last accumulators sent, and this shard's coming home (sent after the last step's compute).
    const Clock::time_point last_wait = Clock::now();
    carried_.Absorb(home_transfer_);
    carried_.Wait("the dK/dV of this rank's shard and the other ranks to receive theirs");
    timings_.back().wait_seconds += SecondsBetween(last_wait, Clock::now());
  }

  // dQ, dK and dV, rounded once to the element type, through the caller's strides.
  void WriteGradients() const {
    const std::int64_t B = a_.batch, Hkv = shape_.heads_kv;
    NarrowInto(dq_.data(), a_.dtype, local_.dq_strides, B, rows_, a_.heads_q, a_.head_dim, local_.dq);
    NarrowInto(home_->data(), a_.dtype, local_.dk_strides, B, rows_, Hkv, shape_.head_dim, local_.dk);
    NarrowInto(home_->data() + shape_.KElements(rows_), a_.dtype, local_.dv_strides, B, rows_, Hkv, shape_.head_dim_v,
               local_.dv);
  }

  // This rank's share of dsinks, when requested: the terms −e^{s_h − LSE_i}·D_i of its own rows only
  // (D_i = dO_i · O_i, with the final LSE, which counts the sink), summed over each sequence's rows in
  // float64 and then over the batch, as one process sums them. The ranks' shares add up to the whole
  // gradient (docs/distributed.md, "Ring backward").
  void WriteSinkGradientShare() const {
    if (local_.dsinks == nullptr) return;
    const std::int64_t B = a_.batch, Hq = a_.heads_q, dv = a_.value_head_dim();
    for (std::int64_t h = 0; h < Hq; ++h) {
      const float sink = a_.sinks[h];
      double share = 0.0;
      for (std::int64_t b = 0; b < B; ++b) {
        double sequence_share = 0.0;
        for (std::int64_t i = 0; i < rows_; ++i) {
          const std::int64_t row = ((b * rows_ + i) * Hq + h) * dv;
          double D = 0.0;
          for (std::int64_t e = 0; e < dv; ++e) D += double{operands_.d_o[row + e]} * operands_.o[row + e];
          sequence_share += SinkGradientTerm(sink, double{a_.lse[(b * Hq + h) * rows_ + i]}, D);
        }
        share += sequence_share;
      }
      local_.dsinks[h] = static_cast<float>(share);
    }
  }

  std::vector<RingStepTiming> TakeTimings() { return std::move(timings_); }

 private:
  int Previous() const { return (comm_.rank() - 1 + comm_.size()) % comm_.size(); }
  int Next() const { return (comm_.rank() + 1) % comm_.size(); }

  // This rank's queries' part of the dK/dV of `source`'s shard (its dQ part goes into dq_), block by block,
  // polling the step's transfers between pieces.
  std::shared_ptr<Floats> Contribution(int source, const Bytes& shard, Step& transfers) {
    const std::int64_t keys = plan_.Length(source), dv = a_.value_head_dim();
    std::shared_ptr<Floats> contribution = MakeAccumulator(shape_, keys);
    AttentionParams base =
        BlockBase(a_, operands_.q.data(), rows_, ShardAsFloats(shard, shape_, keys, kv_scratch_), keys);
    base.o = operands_.o.data();  // read by backward, never written
    base.o_strides = {rows_ * a_.heads_q * dv, a_.heads_q * dv, dv};
    for (const Block& block : plan_.Blocks(comm_.rank(), source, !DependsOnPositions(a_))) {
      for (const Block& piece : Pieces(plan_.band(), block, rows_per_piece_)) {
        piece_gradients_.Compute(LocalCall(base, plan_.seqlen(), piece), piece, operands_, a_.lse);
        piece_gradients_.AddTo(piece, dq_.data(), rows_, contribution->data(), keys);
        transfers.Poll();
      }
    }
    return contribution;
  }

  // The accumulator of `source`'s shard: what came from the previous rank plus this rank's contribution, in
  // that order; sent on with the shard, or home after the last rank that needs it.
  void PassOn(int source, bool passes_on, const std::shared_ptr<Floats>& contribution) {
    std::shared_ptr<Floats> accumulator = incoming_ != nullptr ? incoming_ : contribution;
    if (accumulator == nullptr) accumulator = MakeAccumulator(shape_, plan_.Length(source));
    if (incoming_ != nullptr && contribution != nullptr)
      for (std::size_t e = 0; e < accumulator->size(); ++e) (*accumulator)[e] += (*contribution)[e];
    if (passes_on) {
      carried_.Send(accumulator->data(), SizeInBytes(*accumulator), Next(), kAccumulatorTag, accumulator);
    } else if (source != comm_.rank()) {
      carried_.Send(accumulator->data(), SizeInBytes(*accumulator), source, kHomeTag, accumulator);
    } else {
      home_ = accumulator;
    }
  }

  // The accumulator that follows the next shard (none if `source` < 0: no shard comes).
  void PostAccumulatorReceive(int source) {
    incoming_ = nullptr;
    carried_bytes_ = 0;
    if (source < 0) return;
    incoming_ = MakeAccumulator(shape_, plan_.Length(source));
    carried_.Receive(incoming_->data(), SizeInBytes(*incoming_), Previous(), kAccumulatorTag, incoming_);
    carried_bytes_ = SizeInBytes(*incoming_);
  }

  const BackwardParams& local_;
  const AttentionParams& a_;
  const CallComm& comm_;
  const RingPlan plan_;
  const KvShape shape_;
  const std::int64_t rows_, rows_per_piece_;
  LocalOperands operands_;
  Floats dq_;                     // this rank's dQ, float32
  std::shared_ptr<Floats> home_;  // this shard's dK, dV once complete
  Transfers home_transfer_;       // their trip home from the last rank that needed the shard
  Transfers carried_;             // accumulators in flight: sent last step, or arriving for the next
  std::int64_t carried_bytes_ = 0;
  std::shared_ptr<Floats> incoming_;  // the accumulator of the shard at hand, as the previous rank sent it
  PieceGradients piece_gradients_;
  Floats kv_scratch_;
  std::vector<RingStepTiming> timings_;
};

}  // namespace

void ring_backward(const RingBackwardParams& params, MPI_Comm comm_in) {
  const CallComm comm(comm_in, "ring_backward", params.timeout_seconds);
  const AttentionParams& attention = params.local.attention;
  AgreeOrThrow(comm, RingFields(attention, params.seqlen, params.layout), ErrorOf([&] {
                 CheckRingShard(attention, params.seqlen, params.layout, params.timeout_seconds, comm,
                                "local.attention.");
                 validate(params.local);
               }));
  AgreeOnSinks(comm, attention.sinks, attention.heads_q, "local.attention.sinks");
  BackwardRing ring(params, comm);
  ring.Run();
  ring.WriteGradients();
  ring.WriteSinkGradientShare();
  SetLastRingTimings(ring.TakeTimings());
}

}  // namespace flashattn::distributed
