// flashattn distributed: context parallelism over MPI (library flashattn::mpi, libflashattn_mpi).
//
// A sequence too long for one process is split along its tokens across the W ranks of a communicator.
// Ring attention passes each rank's K/V shard around the ring with non-blocking transfers that overlap the
// local kernel, and merges every step's partial result by its log-sum-exp (the rule of
// merge_attention_states). The backward pass recomputes each block with the final LSE and sends float32
// dK/dV accumulators around the ring with their K/V shard. Decoding over a sharded KV cache merges one
// partial per rank. docs/distributed.md derives the algorithms, the layouts and when a transfer is hidden.
//
// Only this header and libflashattn_mpi depend on MPI; the core library does not.
#ifndef FLASHATTN_DISTRIBUTED_H_
#define FLASHATTN_DISTRIBUTED_H_

#include <mpi.h>

#include <cstdint>
#include <string_view>
#include <vector>

#include "flashattn/backward.h"
#include "flashattn/decode.h"
#include "flashattn/flashattn.h"

namespace flashattn::distributed {

// How the N tokens of a sequence are spread over W ranks.
//   kContiguous: rank r holds rows [⌊rN/W⌋, ⌊(r+1)N/W⌋).
//   kZigzag:     the sequence is cut into 2W chunks, chunk c = rows [⌊cN/2W⌋, ⌊(c+1)N/2W⌋), and rank r
//                holds chunks r and 2W−1−r, in that order. Under a causal mask every rank then does the same
//                work, up to one row per chunk.
// Any N ≥ 0 is accepted; a rank may hold no row (N < W, or N < 2W for zigzag).
enum class ShardLayout : std::uint8_t { kContiguous, kZigzag };

std::string_view to_string(ShardLayout layout);
// Parses "contiguous" or "zigzag"; throws Error naming `argument` otherwise.
ShardLayout parse_layout(std::string_view name, std::string_view argument = "layout");

// The number of rows rank `rank` holds, and their global positions in the order the rank stores them.
// Throws Error for seqlen < 0, world_size < 1 or rank outside [0, world_size).
std::int64_t shard_length(std::int64_t seqlen, int world_size, int rank, ShardLayout layout);
std::vector<std::int64_t> shard_indices(std::int64_t seqlen, int world_size, int rank, ShardLayout layout);

// How long a collective call waits for a transfer or for the other ranks before it gives up with an Error,
// in seconds. A rank that leaves a call (it threw, or stopped calling) makes the others fail after this
// long instead of hanging. Open MPI itself ends the whole job when a process exits without MPI_Finalize.
inline constexpr double kDefaultTimeoutSeconds = 60.0;

// Self-attention over one sequence of `seqlen` tokens (per batch entry) sharded along the sequence.
// `local` describes this rank's shards in flash-attn's layout, each addressed through its own strides:
//   q (batch, L, Hq, d), k (batch, L, Hkv, d), v (batch, L, Hkv, dv), o (batch, L, Hq, dv),
//   lse optional float32 (batch, Hq, L), contiguous,
// with local.seqlen_q == local.seqlen_k == L == shard_length(seqlen, W, rank, layout). Row i of the shard is
// global position shard_indices(...)[i]. The modifiers apply at global positions, as one process would
// apply them to the whole sequence: causal, the sliding window, softcap, scale, ALiBi and dropout (each
// block's call carries its position in the whole problem). Rejected with an Error: a mask tensor (a local
// mask has no global meaning). local.tiling is passed to every block's kernel call; local.num_threads is
// per rank.
// Every block is computed in float32 (float16 and bfloat16 inputs are widened exactly), and O is rounded
// to the element type once, at the end. Attention sinks (local.sinks, the same values on every rank: the
// collective check compares their bits) join each row once, after the merge of its blocks.
struct RingParams {
  AttentionParams local;
  std::int64_t seqlen = 0;  // N, the global sequence length
  ShardLayout layout = ShardLayout::kZigzag;
  double timeout_seconds = kDefaultTimeoutSeconds;  // local policy: need not agree across ranks
};

// The ring backward pass: `local` holds this rank's dO, dQ, dK, dV (shapes of q, k, v, o above, strides
// of their own) and in local.attention the forward call's parameters as in RingParams::local, with o and
// lse (required) the ring forward's outputs. Gradients are exact up to float32 accumulation and bitwise
// identical from run to run for the same inputs, W and thread count.
// With sinks, local.dsinks (optional, float32 (Hq), overwritten) receives THIS RANK'S SHARE of the sinks'
// gradient: −Σ_{b,i} e^{s_h − LSE_i}·D_i over this rank's own query rows only, as for any parameter that
// every rank holds a copy of in context parallelism. The whole gradient is the sum of the shares over the
// ranks of `comm` (an allreduce SUM, which data-parallel wrappers do); ring_backward itself adds no
// communication for it. A rank without rows gets a share of 0.
struct RingBackwardParams {
  BackwardParams local;
  std::int64_t seqlen = 0;
  ShardLayout layout = ShardLayout::kZigzag;
  double timeout_seconds = kDefaultTimeoutSeconds;
};

// Collective over `comm`: every rank calls it. The parameters are checked collectively before any
// transfer: if any rank's input is invalid, or the ranks disagree (shapes, dtype, modifiers, layout,
// seqlen, ...), every rank throws Error naming the parameter and the ranks' values, and nobody hangs.
// When a call throws, nothing the caller owns has been written. `comm` is duplicated internally (with
// MPI_ERRORS_RETURN), so the call's messages never mix with the caller's.
void ring_forward(const RingParams& params, MPI_Comm comm);
void ring_backward(const RingBackwardParams& params, MPI_Comm comm);

// Decoding over a sharded KV cache. `local` is this rank's decode call over ITS consecutive part of every
// sequence's cache: rank 0 holds the oldest keys, rank r the next ones, and local.cache_seqlens[b] counts
// the keys of sequence b on this rank (contiguous or paged cache). q, the shapes and the modifiers are the
// same on every rank. The new keys k_new/v_new (when seqlen_new > 0) are appended on the rank that holds
// the sequence's tail: the highest rank with at least one key of the sequence, or rank 0 if no rank has
// any; the other ranks ignore k_new/v_new (they may pass null) and leave their cache untouched. Rotary
// embedding uses global positions. Causal masks, windows and ALiBi apply at global positions (the query
// rows are the last rows of the whole sequence). head_dim_v may differ from head_dim, V may be read inside
// the K cache (v_cache == k_cache, head_dim_v < head_dim) as decode() allows. A quantized cache (int8, FP8)
// works as in decode(), its per-token scales being this rank's rows of them (appended with the keys on
// the tail rank); the ranks must agree on the element type, the scale granularity and group size, and the
// integer options. With quantize_probs_u8 the weights are rounded per block of each rank's keys, so the result
// differs from one process's by that rounding.
// Packed queries (local.cu_seqlens_q set, decode()'s packed form: q, o, k_new, v_new (total_q, ...), lse (Hq,
// total_q)) are accepted: sequence b's Nq_b query rows are the last positions of its whole sequence, and the
// tail rank appends its Nq_b new rows when seqlen_new = seqlen_q. The ranks must pass the same cu_seqlens_q
// values (checked collectively, every rank throws naming the first entry that differs).
// Every rank computes its partial (O_r, LSE_r) in float32 without the sinks, one collective gathers the
// partials (O(total query rows·Hq·dv) floats per rank, whatever the cache length), and every rank merges them in
// rank order (deterministic) into local.o and local.lse (optional). Attention sinks (the same values on
// every rank) join once, in that merge: LSE = log(Σ_r e^{LSE_r} + e^{s_h}), O = Σ_r e^{LSE_r − LSE} O_r, so
// that a sequence no rank holds a key of gets O = 0 and LSE = s_h. The same collective check as the ring
// calls comes first.
void sharded_decode(const DecodeParams& local, MPI_Comm comm, double timeout_seconds = kDefaultTimeoutSeconds);

// Per-step timing of the last ring_forward or ring_backward on this rank (one entry per ring step, W in
// all), for benchmarks and the docs' simulation.
struct RingStepTiming {
  double compute_seconds = 0;   // local kernel calls and merges of the step
  double transfer_seconds = 0;  // from posting the step's sends/receives until both completed
  double wait_seconds = 0;      // time spent waiting for them after the compute was done (0 = fully hidden)
  std::int64_t bytes = 0;       // bytes this rank received for the step (0 = no transfer)
};
std::vector<RingStepTiming> last_ring_timings();

}  // namespace flashattn::distributed

#endif  // FLASHATTN_DISTRIBUTED_H_
