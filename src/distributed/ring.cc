#include "distributed/ring.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "distributed/agreement.h"
#include "distributed/comm.h"
#include "distributed/element_cast.h"
#include "distributed/layout.h"
#include "flashattn/distributed.h"
#include "flashattn/flashattn.h"

namespace flashattn::distributed {
namespace {

std::mutex timings_mutex;
std::vector<RingStepTiming> last_timings;

}  // namespace

std::vector<Field> RingFields(const AttentionParams& local, std::int64_t seqlen, ShardLayout layout) {
  return {
      {"seqlen", seqlen},
      {"layout", static_cast<std::int64_t>(layout)},
      {"dtype", static_cast<std::int64_t>(local.dtype)},
      {"batch", local.batch},
      {"heads_q", local.heads_q},
      {"heads_kv", local.heads_kv},
      {"head_dim", local.head_dim},
      {"head_dim_v", local.value_head_dim()},
      {"scale given", local.scale.has_value()},
      FloatField("scale", local.scale.value_or(0.0f)),
      {"causal", local.causal},
      {"window_left", local.window_left},
      {"window_right", local.window_right},
      FloatField("softcap", local.softcap),
      {"alibi_slopes given", local.alibi_slopes != nullptr},
      {"alibi_batch_stride", local.alibi_batch_stride},
      {"sinks given", local.sinks != nullptr},
      FloatField("dropout_p", local.dropout_p),
      {"dropout_seed", static_cast<std::int64_t>(local.dropout_seed)},
      {"dropout_offset", static_cast<std::int64_t>(local.dropout_offset)},
      {"mask.kind", static_cast<std::int64_t>(local.mask.kind)},
  };
}

bool DependsOnPositions(const AttentionParams& params) {
  return params.alibi_slopes != nullptr || params.dropout_p > 0.0f;
}

void CheckRingShard(const AttentionParams& local, std::int64_t seqlen, ShardLayout layout, double timeout_seconds,
                    const CallComm& comm, const char* names) {
  if (!(timeout_seconds > 0)) Fail("timeout_seconds must be > 0, got ", timeout_seconds);
  const std::int64_t rows = shard_length(seqlen, comm.size(), comm.rank(), layout);
  if (local.seqlen_q != rows || local.seqlen_k != rows) {
    Fail(names, "seqlen_q and ", names, "seqlen_k must both be shard_length(seqlen=", seqlen,
         ", world_size=", comm.size(), ", rank=", comm.rank(), ", layout=", to_string(layout), ") = ", rows, ", got ",
         local.seqlen_q, " and ", local.seqlen_k);
  }
  if (local.mask.kind != MaskKind::kNone) {
    Fail(names,
         "mask: a mask tensor is not supported by the ring (a shard's mask has no global meaning); "
         "use causal and the window");
  }
  if (local.block_position != BlockPosition{}) {
    Fail(names, "block_position must be the default: the ring places each of its blocks in the sequence itself");
  }
  // As a block of the whole sequence, so that dropout's counters are checked over all of it.
  AttentionParams placed = local;
  placed.block_position.total_seqlen_q = placed.block_position.total_seqlen_k = seqlen;
  validate(placed);
}

KvShape KvShape::Of(const AttentionParams& params) {
  return KvShape{params.batch, params.heads_kv, params.head_dim, params.value_head_dim(), params.dtype};
}

std::shared_ptr<Bytes> PackShard(const AttentionParams& local, std::int64_t rows) {
  const KvShape shape = KvShape::Of(local);
  auto shard = std::make_shared<Bytes>(static_cast<std::size_t>(shape.Bytes(rows)));
  const std::int64_t element = static_cast<std::int64_t>(size_of(local.dtype));
  std::byte* out = shard->data();
  auto pack = [&](const void* data, const Strides& strides, std::int64_t dim) {
    for (std::int64_t b = 0; b < shape.batch; ++b)
      for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t h = 0; h < shape.heads_kv; ++h) {
          const std::int64_t at = b * strides.batch + i * strides.seq + h * strides.head;
          std::memcpy(out, static_cast<const std::byte*>(data) + at * element, static_cast<std::size_t>(dim * element));
          out += dim * element;
        }
  };
  pack(local.k, local.k_strides, shape.head_dim);
  pack(local.v, local.v_strides, shape.head_dim_v);
  return shard;
}

KvFloats ShardAsFloats(const Bytes& shard, const KvShape& shape, std::int64_t rows, std::vector<float>& scratch) {
  const std::int64_t k_elements = shape.KElements(rows);
  if (shape.dtype == DType::kF32) {
    const auto* floats = reinterpret_cast<const float*>(shard.data());
    return {floats, floats + k_elements};
  }
  scratch.resize(static_cast<std::size_t>(k_elements + shape.VElements(rows)));
  WidenContiguous(shard.data(), shape.dtype, k_elements + shape.VElements(rows), scratch.data());
  return {scratch.data(), scratch.data() + k_elements};
}

std::vector<float> WidenShardRows(const AttentionParams& local, const void* data, const Strides& strides,
                                  std::int64_t dim) {
  std::vector<float> out(static_cast<std::size_t>(local.batch * local.seqlen_q * local.heads_q * dim));
  WidenRows(StridedTensor{data, strides, local.batch, local.seqlen_q, local.heads_q, dim}, local.dtype, 0,
            local.seqlen_q, out.data());
  return out;
}

AttentionParams BlockBase(const AttentionParams& local, const float* q, std::int64_t rows, const KvFloats& kv,
                          std::int64_t keys) {
  AttentionParams base = local;
  base.dtype = DType::kF32;
  base.q = q;
  base.k = kv.k;
  base.v = kv.v;
  base.o = nullptr;
  base.lse = nullptr;
  base.seqlen_q = rows;
  base.seqlen_k = keys;
  base.head_dim_v = local.value_head_dim();
  base.mask = MaskTensor{};
  base.sinks = nullptr;  // a block holds part of each row's keys: the sink joins once, after the ring's merge
  base.set_contiguous_strides();
  return base;
}

std::int64_t RowsPerPiece(std::int64_t rows) {
  constexpr std::int64_t kPieces = 8, kMinRows = 128;
  return std::max(kMinRows, (rows + kPieces - 1) / kPieces);
}

void Step::NotePosted() {
  if (!posted_) posted_ = !transfers.Empty();
}

void Step::Poll() {
  NotePosted();
  if (!transfers_done_ && transfers.Test()) transfers_done_ = Clock::now();
}

RingStepTiming Step::Finish(std::string_view what) {
  const Clock::time_point compute_end = Clock::now();
  NotePosted();
  transfers.Wait(what);
  const Clock::time_point end = Clock::now();
  if (!transfers_done_) transfers_done_ = end;
  RingStepTiming timing;
  timing.compute_seconds = SecondsBetween(start_, compute_end);
  timing.transfer_seconds = *posted_ ? SecondsBetween(start_, *transfers_done_) : 0.0;
  timing.wait_seconds = SecondsBetween(compute_end, end);
  timing.bytes = bytes_received;
  return timing;
}

std::string StepTransfers(int step, const CallComm& comm) {
  const int world = comm.size();
  return "step " + std::to_string(step) + "'s transfers with ranks " +
         std::to_string((comm.rank() + world - 1) % world) + " and " + std::to_string((comm.rank() + 1) % world);
}

void SetLastRingTimings(std::vector<RingStepTiming> timings) {
  const std::lock_guard<std::mutex> lock(timings_mutex);
  last_timings = std::move(timings);
}

std::vector<RingStepTiming> last_ring_timings() {
  const std::lock_guard<std::mutex> lock(timings_mutex);
  return last_timings;
}

}  // namespace flashattn::distributed
