// The decode baseline: what a C++ user would write without Flash-Decoding. Per (sequence, K/V head) and
// query position, the G = Hq/Hkv query rows that share the K/V head form one G×d matrix, and
//   S = s·Q Kᵀ (sgemm, G×N),  P = safe_softmax_row(S) (vectorized, causal prefix),  O = P V (sgemm, G×d)
// over a contiguous float32 cache. The G·N scores go to memory and back; the cache is read once by each
// product, so the baseline reads K and V once each, like the fused kernel, plus the scores.
#ifndef FLASHATTN_BENCH_DECODE_BASELINE_H_
#define FLASHATTN_BENCH_DECODE_BASELINE_H_

#include <cstdint>
#include <vector>

#include "bench/baseline.h"

namespace flashattn::bench {

// float32 tensors, contiguous: q and o (batch, Nq, Hq, d), k and v (batch, Nmax, Hkv, d), lse optional
// (batch, Hq, Nq). Sequence b attends to its first cache_seqlens[b] keys; with `causal`, query row i sits at
// position cache_seqlens[b] − Nq + i and sees keys j ≤ that position (decode's alignment).
struct DecodeBaselineProblem {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  float* o = nullptr;
  float* lse = nullptr;
  const std::int32_t* cache_seqlens = nullptr;
  std::int64_t batch = 1, seqlen_q = 1, heads_q = 1, heads_kv = 1, head_dim = 0, cache_seqlen_max = 0;
  bool causal = false;
  int num_threads = 1;
};

// The problem of decode call `p` over a contiguous float32 cache of capacity `cache_seqlen_max`: p's shape,
// cache lengths, causal flag and thread count; the arrays unset.
DecodeBaselineProblem BaselineProblemOf(const DecodeParams& p, std::int64_t cache_seqlen_max);

class BlasDecodeBaseline {
 public:
  // Allocates the scratch (`problem`'s pointers must outlive this object). Throws Error for bad shapes.
  BlasDecodeBaseline(const DecodeBaselineProblem& problem, BaselineArrangement arrangement);
  // Bytes of scratch the arrangement needs (the G×N scores of each worker).
  static std::int64_t ScratchBytes(const DecodeBaselineProblem& problem, BaselineArrangement arrangement);
  // Writes o, and lse if set.
  void Run();

 private:
  void Group(std::int64_t b, std::int64_t hk, std::vector<float>& S, int row_threads) const;

  DecodeBaselineProblem p_;
  BaselineArrangement arrangement_;
  float scale_;
  std::vector<std::vector<float>> scratch_;  // per worker: G×Nmax scores
};

}  // namespace flashattn::bench

#endif  // FLASHATTN_BENCH_DECODE_BASELINE_H_
