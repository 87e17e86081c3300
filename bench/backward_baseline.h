// The backward baseline: the standard backward pass as a C++ user would write it with OpenBLAS, per query
// head, materializing the Nq×Nk matrices P and dS (the formulas of flashattn/backward.h and docs/backward.md):
//   S = s·Q Kᵀ, P = exp(S − LSE) (vectorized; causal prefix), D = rowsum(dO ∘ O),
//   dV += Pᵀ dO, dP = dO Vᵀ, dS = P ∘ (dP − D), dQ = s·dS K, dK += s·dSᵀ Q
// (five sgemm calls; dK and dV summed over the query heads of a K/V head). Float16/bfloat16 tensors are
// converted to float32 around the products inside the timed call. Two threading arrangements, as forward's
// baseline: K/V-head groups in parallel with single-threaded BLAS (a group's heads in turn, so the dK, dV
// sums need no atomics), or groups in turn with BLAS and the row operations on all threads.
#ifndef FLASHATTN_BENCH_BACKWARD_BASELINE_H_
#define FLASHATTN_BENCH_BACKWARD_BASELINE_H_

#include <cstdint>
#include <vector>

#include "bench/baseline.h"
#include "flashattn/backward.h"

namespace flashattn::bench {

class BlasBackwardBaseline {
 public:
  // Allocates the scratch for `params` (which must outlive this object). Supports what the benchmark varies:
  // shapes, strides, GQA, causal, the three element types, d ≠ dv. Throws Error for anything else (window,
  // softcap, ALiBi, mask tensor, dropout, num_threads < 1) and for invalid params.
  BlasBackwardBaseline(const BackwardParams& params, BaselineArrangement arrangement);

  // Bytes of scratch the arrangement needs (P and dS, Nq×Nk each, per worker, dominate).
  static std::int64_t ScratchBytes(const BackwardParams& params, BaselineArrangement arrangement);

  // Writes dq, dk, dv.
  void Run();

 private:
  struct Scratch {
    std::vector<float> P, dS, D;           // Nq×Nk, Nq×Nk, Nq
    std::vector<float> q, o, d_o, dq;      // one query head in float32 (element type not float32)
    std::vector<float> k, v, dk, dv;       // one K/V head in float32 (element type not float32)
  };
  void Group(std::int64_t b, std::int64_t hk, Scratch& s, int row_threads) const;

  const BackwardParams& params_;
  BaselineArrangement arrangement_;
  int threads_;
  float scale_;
  std::vector<Scratch> scratch_;  // one per worker
};

}  // namespace flashattn::bench

#endif  // FLASHATTN_BENCH_BACKWARD_BASELINE_H_
