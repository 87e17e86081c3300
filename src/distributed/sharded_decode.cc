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
    const std::int64_t length = total + local.seqlen_new;  // of the whole sequence, after the append
    // The same on every rank, so that every rank throws together: keys_after ≤ length fits the int32 array.
    if (length > std::numeric_limits<std::int32_t>::max()) {
      Fail("sequence ", b, " has ", length, " keys over all ranks (with seqlen_new), more than int32 positions");
    }
    SequencePlan plan;
    plan.appends = rank == tail && local.seqlen_new > 0;
    const std::int64_t keys = count(rank) + (plan.appends ? local.seqlen_new : 0);
    // Query row i sits at length − Nq + i; this rank's keys at before + j.
    const Block whole{0, local.seqlen_q, length - local.seqlen_q, 0, keys, before};
    if (const std::optional<Block> part = VisiblePart(band, whole)) {
      plan.attends = true;
      plan.keys = static_cast<std::int32_t>(plan.appends ? count(rank) : part->key_begin + part->keys);
      const std::int64_t call_keys = plan.keys + (plan.appends ? local.seqlen_new : 0);
      plan.keys_after = static_cast<std::int32_t>(length - before - call_keys);
      // The library rotates q (and k_new) at cache_seqlens[b] + i; the sequence's are at total + i.
      if (local.rotary_dim > 0) plan.rotary_shift = total - plan.keys;
    }
    plans.push_back(plan);
  }
  return plans;
}

// One decode call for sequences [first, first + count), which share a plan; it owns the call's per-sequence
// key counts and its outputs, and widens them into the float32 partial.
class PartialCall {
 public:
  PartialCall(const DecodeParams& local, const std::vector<SequencePlan>& plans, std::int64_t first, std::int64_t count)
      : local_(local), first_(first), count_(count), plan_(plans[static_cast<std::size_t>(first)]) {
    for (std::int64_t b = first; b < first + count; ++b) {
      keys_.push_back(plans[static_cast<std::size_t>(b)].keys);
      keys_after_.push_back(plans[static_cast<std::size_t>(b)].keys_after);
    }
    const std::int64_t elements = count * local.seqlen_q * local.heads_q * local.value_head_dim();
    o_.resize(static_cast<std::size_t>(elements * static_cast<std::int64_t>(size_of(local.dtype))));
    lse_.resize(static_cast<std::size_t>(count * local.heads_q * local.seqlen_q));
  }

  bool Empty() const { return !plan_.attends; }
  void Validate() {
    if (!Empty()) flashattn::validate(Call());
  }

  // Decodes, then writes its sequences into the partial (o (batch, Nq, Hq, dv) and lse (batch, Hq, Nq),
  // float32).
  void Run(float* o, float* lse) {
    if (Empty()) return;
    decode(Call());
    const std::int64_t Nq = local_.seqlen_q, Hq = local_.heads_q, dv = local_.value_head_dim();
    WidenContiguous(o_.data(), local_.dtype, count_ * Nq * Hq * dv, o + first_ * Nq * Hq * dv);
    std::copy(lse_.begin(), lse_.end(), lse + first_ * Hq * Nq);
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
    call.q = static_cast<const char*>(local.q) + first_ * local.q_strides.batch * element;
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
      call.k_new = static_cast<const char*>(local.k_new) + first_ * local.new_strides.batch * element;
      // Null when V is read inside the K cache: the append writes k_new's row once.
      if (local.v_new != nullptr) {
        call.v_new = static_cast<const char*>(local.v_new) + first_ * local.new_strides.batch * element;
      }
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
    call.o_strides = {local.seqlen_q * Hq * dv, Hq * dv, dv};
    return call;
  }

  const DecodeParams& local_;
  std::int64_t first_, count_;
  SequencePlan plan_;
  std::vector<std::int32_t> keys_, keys_after_;
  std::vector<std::byte> o_;
  std::vector<float> lse_;
};

void CheckLocalDecode(const DecodeParams& local, double timeout_seconds) {
  if (!(timeout_seconds > 0)) Fail("timeout_seconds must be > 0, got ", timeout_seconds);
  if (local.keys_after != nullptr) Fail("keys_after must be null: sharded_decode places each rank's keys itself");
  if (local.packed()) Fail("cu_seqlens_q must be null: sharded_decode takes (batch, seqlen_q) queries");
  if (local.batch > 0 && local.cache_seqlens == nullptr) Fail("cache_seqlens is a null pointer");
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
  const std::int64_t Nq = local.seqlen_q, Hq = local.heads_q, dv = local.value_head_dim();
  const std::int64_t o_count = local.batch * Nq * Hq * dv, lse_count = local.batch * Hq * Nq;
  const std::int64_t partial_count = o_count + lse_count;
  auto partial = std::make_shared<std::vector<float>>(static_cast<std::size_t>(partial_count), 0.0f);
  std::fill(partial->begin() + o_count, partial->end(), -std::numeric_limits<float>::infinity());
  for (PartialCall& call : calls) call.Run(partial->data(), partial->data() + o_count);

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
  merge.batch = local.batch;
  merge.seqlen = Nq;
  merge.heads = Hq;
  merge.head_dim_v = dv;
  merge.dtype = local.dtype;
  merge.sinks = local.sinks;  // joins each row once: LSE = log(Σ_r e^{LSE_r} + e^{s_h})
  merge_attention_states(merge);
}

}  // namespace flashattn::distributed
