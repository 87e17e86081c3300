// sharded_decode: every rank decodes against its part of each sequence's cache, at global positions; one
// gather of the float32 partials and a merge in rank order give every rank the whole result
// (docs/distributed.md, "Decoding over a sharded cache").
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/quantize.h"
#include "distributed/agreement.h"
#include "distributed/block.h"
#include "distributed/comm.h"
#include "distributed/element_cast.h"
#include "distributed/layout.h"
#include "flashattn/decode.h"
#include "flashattn/distributed.h"
#include "flashattn/flashattn.h"

namespace flashattn::distributed {
namespace {

std::vector<Field> DecodeFields(const DecodeParams& p) {
  return {
      {"batch", p.batch},
      {"cu_seqlens_q given", p.packed()},
      {"seqlen_q", p.seqlen_q},
      {"seqlen_new", p.seqlen_new},
      {"heads_q", p.heads_q},
      {"heads_kv", p.heads_kv},
      {"head_dim", p.head_dim},
      {"head_dim_v", p.value_head_dim()},
      {"dtype", static_cast<std::int64_t>(p.dtype)},
      {"cache_dtype", p.cache_element == CacheElement::kFloat ? static_cast<std::int64_t>(p.cache_dtype) : -1},
      {"cache_element", static_cast<std::int64_t>(p.cache_element)},
      {"scale_granularity", static_cast<std::int64_t>(p.scale_granularity)},
      {"scale_group_size", p.scale_group_size},
      {"quantize_query_int8", p.quantize_query_int8},
      {"quantize_probs_u8", p.quantize_probs_u8},
      {"values inside the keys", p.values_in_keys()},
      {"scale given", p.scale.has_value()},
      FloatField("scale", p.scale.value_or(0.0f)),
      {"causal", p.causal},
      {"window_left", p.window_left},
      {"window_right", p.window_right},
      FloatField("softcap", p.softcap),
      {"alibi_slopes given", p.alibi_slopes != nullptr},
      {"sinks given", p.sinks != nullptr},
      {"rotary_dim", p.rotary_dim},
      {"rotary_max_pos", p.rotary_max_pos},
      {"rotary_interleaved", p.rotary_interleaved},
      {"rotary_queries_at_cache_end", p.rotary_queries_at_cache_end},
  };
}

// What this rank's call does for sequence b: whether it attends at all (some query row sees one of its keys),
// its keys [0, keys) (the later ones are seen by no row), the keys of the whole sequence after them
// (keys_after, which places the queries at their global positions), whether it appends the new keys, and
// the rotary tables' shift to global positions. Sequences with equal plans but for `keys` and `keys_after`
// share one call.
struct SequencePlan {
  bool attends = false;
  std::int32_t keys = 0, keys_after = 0;
  bool appends = false;
  std::int64_t rotary_shift = 0;

  bool SharesCallWith(const SequencePlan& other) const {
    return attends == other.attends && appends == other.appends && rotary_shift == other.rotary_shift;
  }
};

// counts[r·batch + b]: the keys of sequence b on rank r before the call.
std::vector<SequencePlan> PlanSequences(const DecodeParams& local, const std::vector<std::int64_t>& counts, int rank,
                                        int world) {
  const Band band = Band::Of(local);
  std::vector<SequencePlan> plans;
  for (std::int64_t b = 0; b < local.batch; ++b) {
    auto count = [&](int r) { return counts[static_cast<std::size_t>(r * local.batch + b)]; };
    std::int64_t before = 0, total = 0;
    int tail = world - 1;
    for (int r = 0; r < world; ++r) {
      if (r < rank) before += count(r);
      total += count(r);
    }
    while (tail > 0 && count(tail) == 0) --tail;
    const std::int64_t rows = local.query_rows(b), new_rows = local.new_rows(b);
    const std::int64_t length = total + new_rows;  // of the whole sequence, after the append
    // The same on every rank, so that every rank throws together: keys_after ≤ length fits the int32 array.
    if (length > std::numeric_limits<std::int32_t>::max()) {
      Fail("sequence ", b, " has ", length, " keys over all ranks (with its new ones), more than int32 positions");
    }
    SequencePlan plan;
    plan.appends = rank == tail && new_rows > 0;
    const std::int64_t keys = count(rank) + (plan.appends ? new_rows : 0);
    // Query row i sits at length − Nq_b + i; this rank's keys at before + j.
    const Block whole{0, rows, length - rows, 0, keys, before};
    if (const std::optional<Block> part = VisiblePart(band, whole)) {
      plan.attends = true;
      plan.keys = static_cast<std::int32_t>(plan.appends ? count(rank) : part->key_begin + part->keys);
      const std::int64_t call_keys = plan.keys + (plan.appends ? new_rows : 0);
      plan.keys_after = static_cast<std::int32_t>(length - before - call_keys);
      // The library rotates q (and k_new) at cache_seqlens[b] + i; the sequence's are at total + i.
      if (local.rotary_dim > 0) plan.rotary_shift = total - plan.keys;
    }
    plans.push_back(plan);
  }
  return plans;
}

// The first query row of sequence b among all the call's rows: its place in q (packed) and in the partial.
std::int64_t FirstRow(const DecodeParams& local, std::int64_t b) {
  return local.packed() ? std::int64_t{local.cu_seqlens_q[b]} : b * local.seqlen_q;
}

// The float32 partial each rank computes and every rank merges: o (rows, Hq, dv) over all the query rows,
// and lse in decode's layout, (batch, Hq, Nq) or, packed, (Hq, total_q). The merge reads packed rows as one
// sequence of total_q rows: (1, total_q, Hq, dv) and (1, Hq, total_q) are those very layouts.
struct PartialShape {
  std::int64_t rows, heads, dv;
  std::int64_t merge_batch, merge_seqlen;

  static PartialShape Of(const DecodeParams& local) {
    const std::int64_t rows = local.total_query_rows();
    return local.packed() ? PartialShape{rows, local.heads_q, local.value_head_dim(), 1, rows}
                          : PartialShape{rows, local.heads_q, local.value_head_dim(), local.batch, local.seqlen_q};
  }
  std::int64_t OCount() const { return rows * heads * dv; }
  std::int64_t LseCount() const { return rows * heads; }
};

// One decode call for sequences [first, first + count), which share a plan; it owns the call's per-sequence
// key counts, its cu_seqlens_q (packed: the slice of the sequences, from 0) and its outputs, and widens them
// into the float32 partial.
class PartialCall {
 public:
  PartialCall(const DecodeParams& local, const std::vector<SequencePlan>& plans, std::int64_t first, std::int64_t count)
      : local_(local), first_(first), count_(count), plan_(plans[static_cast<std::size_t>(first)]) {
    for (std::int64_t b = first; b < first + count; ++b) {
      keys_.push_back(plans[static_cast<std::size_t>(b)].keys);
      keys_after_.push_back(plans[static_cast<std::size_t>(b)].keys_after);
    }
    first_row_ = FirstRow(local, first);
    rows_ = FirstRow(local, first + count) - first_row_;
    if (local.packed()) {
      for (std::int64_t b = first; b <= first + count; ++b)
        cu_seqlens_q_.push_back(static_cast<std::int32_t>(local.cu_seqlens_q[b] - first_row_));
    }
    const std::int64_t elements = rows_ * local.heads_q * local.value_head_dim();
    o_.resize(static_cast<std::size_t>(elements * static_cast<std::int64_t>(size_of(local.dtype))));
    lse_.resize(static_cast<std::size_t>(rows_ * local.heads_q));
  }

  bool Empty() const { return !plan_.attends; }
  void Validate() {
    if (!Empty()) flashattn::validate(Call());
  }

  // Decodes, then writes its rows into the partial of shape `shape`.
  void Run(const PartialShape& shape, float* o, float* lse) {
    if (Empty()) return;
    decode(Call());
    const std::int64_t Hq = shape.heads, dv = shape.dv;
    WidenContiguous(o_.data(), local_.dtype, rows_ * Hq * dv, o + first_row_ * Hq * dv);
    if (local_.packed()) {  // (Hq, rows of the call) into (Hq, total_q)
      for (std::int64_t h = 0; h < Hq; ++h)
        std::copy_n(lse_.begin() + h * rows_, rows_, lse + h * shape.rows + first_row_);
    } else {  // whole sequences of (batch, Hq, Nq)
      std::copy(lse_.begin(), lse_.end(), lse + first_ * Hq * local_.seqlen_q);
    }
  }

 private:
  // The caller's call, moved to the first sequence and given the plan's keys, their place in the sequence
  // and the rotary shift; without the sinks, which join once, after the ranks' partials are merged.
  DecodeParams Call() {
    const DecodeParams& local = local_;
    // q and k_new/v_new hold the query's float type; the cache its own (a byte per quantized element).
    const std::int64_t element = static_cast<std::int64_t>(size_of(local.dtype));
    const std::int64_t cache_element = CacheElementBytes(local);
    DecodeParams call = local;
    call.batch = count_;
    call.cache_seqlens = keys_.data();
    call.keys_after = keys_after_.data();
    if (local.packed()) call.cu_seqlens_q = cu_seqlens_q_.data();
    call.q = static_cast<const char*>(local.q) + local.row_offset(local.q_strides, first_, 0, 0) * element;
    if (local.paged()) {
      call.block_table = local.block_table + first_ * local.block_table_stride;
    } else {
      call.k_cache = static_cast<char*>(local.k_cache) + first_ * local.cache_strides.batch * cache_element;
      call.v_cache = static_cast<char*>(local.v_cache) + first_ * local.cache_strides.batch * cache_element;
      if (local.scale_granularity == ScaleGranularity::kPerToken) {  // per-token scales, row for row
        const std::int64_t scale_offset = first_ * ScaleStridesOf(local).batch;
        if (local.k_scale != nullptr) call.k_scale = local.k_scale + scale_offset;
        if (local.v_scale != nullptr) call.v_scale = local.v_scale + scale_offset;
      }
    }
    if (plan_.appends) {
      const std::int64_t new_offset = local.row_offset(local.new_strides, first_, 0, 0) * element;
      call.k_new = static_cast<const char*>(local.k_new) + new_offset;
      // Null when V is read inside the K cache: the append writes k_new's row once.
      if (local.v_new != nullptr) call.v_new = static_cast<const char*>(local.v_new) + new_offset;
    } else {
      call.seqlen_new = 0;
      call.k_new = call.v_new = nullptr;
    }
    if (local.rotary_dim > 0) {
      call.rotary_cos = local.rotary_cos + plan_.rotary_shift * (local.rotary_dim / 2);
      call.rotary_sin = local.rotary_sin + plan_.rotary_shift * (local.rotary_dim / 2);
      call.rotary_max_pos = local.rotary_max_pos - plan_.rotary_shift;
    }
    const std::int64_t Hq = local.heads_q, dv = local.value_head_dim();
    call.sinks = nullptr;
    call.o = o_.data();
    call.lse = lse_.data();
    call.o_strides = {local.packed() ? 0 : local.seqlen_q * Hq * dv, Hq * dv, dv};
    return call;
  }

  const DecodeParams& local_;
  std::int64_t first_, count_;
  std::int64_t first_row_ = 0, rows_ = 0;  // the call's query rows among all of them
  SequencePlan plan_;
  std::vector<std::int32_t> keys_, keys_after_, cu_seqlens_q_;
  std::vector<std::byte> o_;
  std::vector<float> lse_;
};

void CheckLocalDecode(const DecodeParams& local, double timeout_seconds) {
  if (!(timeout_seconds > 0)) Fail("timeout_seconds must be > 0, got ", timeout_seconds);
  if (local.keys_after != nullptr) Fail("keys_after must be null: sharded_decode places each rank's keys itself");
  if (local.batch > 0 && local.cache_seqlens == nullptr) Fail("cache_seqlens is a null pointer");
  // Checked here as well as by the appending rank's call, which need not exist (no sequence has a query row).
  if (local.packed() && local.seqlen_new != 0 && local.seqlen_new != local.seqlen_q) {
    Fail("seqlen_new must be 0 or seqlen_q=", local.seqlen_q, " with packed queries (cu_seqlens_q set), got ",
         local.seqlen_new);
  }
  // The call as a rank that appends nothing makes it; the appending rank's call is checked once every
  // rank's counts are known.
  DecodeParams reading = local;
  reading.seqlen_new = 0;
  reading.k_new = reading.v_new = nullptr;
  validate(reading);
}

}  // namespace

void sharded_decode(const DecodeParams& local, MPI_Comm comm_in, double timeout_seconds) {
  const CallComm comm(comm_in, "sharded_decode", timeout_seconds);
  AgreeOrThrow(comm, DecodeFields(local), ErrorOf([&] { CheckLocalDecode(local, timeout_seconds); }));
  AgreeOnSinks(comm, local.sinks, local.heads_q, "sinks");
  // Valid on every rank by now, so batch + 1 readable entries everywhere.
  if (local.packed()) {
    AgreeOnValues(comm, "cu_seqlens_q", {local.cu_seqlens_q, static_cast<std::size_t>(local.batch + 1)});
  }
  const int rank = comm.rank(), world = comm.size();
  const std::vector<std::int64_t> counts =
      GatherValues(comm, std::vector<std::int64_t>(local.cache_seqlens, local.cache_seqlens + local.batch),
                   "the other ranks' cache_seqlens");

  const std::vector<SequencePlan> plans = PlanSequences(local, counts, rank, world);
  std::vector<PartialCall> calls;
  for (std::int64_t first = 0; first < local.batch;) {
    std::int64_t end = first + 1;
    while (end < local.batch &&
           plans[static_cast<std::size_t>(end)].SharesCallWith(plans[static_cast<std::size_t>(first)]))
      ++end;
    calls.emplace_back(local, plans, first, end - first);
    first = end;
  }
  // Appending (the rank's cache grows, and may not have room) and rotary positions (the shifted tables may
  // run out) can fail where the local check passed: checked collectively before anything is written.
  // Otherwise every call reads a part of what the local check accepted.
  if (local.seqlen_new > 0 || local.rotary_dim > 0) {
    AgreeOrThrow(comm, {}, ErrorOf([&] {
                   for (PartialCall& call : calls) call.Validate();
                 }));
  }

  // This rank's partial, O then LSE in one buffer, so that one collective gathers both.
  const PartialShape shape = PartialShape::Of(local);
  const std::int64_t o_count = shape.OCount(), lse_count = shape.LseCount();
  const std::int64_t partial_count = o_count + lse_count;
  auto partial = std::make_shared<std::vector<float>>(static_cast<std::size_t>(partial_count), 0.0f);
  std::fill(partial->begin() + o_count, partial->end(), -std::numeric_limits<float>::infinity());
  for (PartialCall& call : calls) call.Run(shape, partial->data(), partial->data() + o_count);

  auto gathered = std::make_shared<std::vector<float>>(static_cast<std::size_t>(partial_count * world));
  MPI_Request request;
  comm.Check(MPI_Iallgather(partial->data(), static_cast<int>(partial_count), MPI_FLOAT, gathered->data(),
                            static_cast<int>(partial_count), MPI_FLOAT, comm.get(), &request),
             "MPI_Iallgather of the partial results");
  WaitCollective(comm, request, {partial, gathered}, "the other ranks' partial results");
  std::vector<float> o_partials, lse_partials;  // rank after rank, as merge_attention_states reads them
  o_partials.reserve(static_cast<std::size_t>(o_count * world));
  lse_partials.reserve(static_cast<std::size_t>(lse_count * world));
  for (int r = 0; r < world; ++r) {
    const auto from = gathered->begin() + r * partial_count;
    o_partials.insert(o_partials.end(), from, from + o_count);
    lse_partials.insert(lse_partials.end(), from + o_count, from + partial_count);
  }

  MergeParams merge;
  merge.o_partials = o_partials.data();
  merge.lse_partials = lse_partials.data();
  merge.o = local.o;
  merge.lse = local.lse;
  merge.o_strides = local.o_strides;
  merge.num_partials = world;
  merge.batch = shape.merge_batch;
  merge.seqlen = shape.merge_seqlen;
  merge.heads = shape.heads;
  merge.head_dim_v = shape.dv;
  merge.dtype = local.dtype;
  merge.sinks = local.sinks;  // joins each row once: LSE = log(Σ_r e^{LSE_r} + e^{s_h})
  merge_attention_states(merge);
}

}  // namespace flashattn::distributed
