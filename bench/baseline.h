// The baseline every timed row is compared against: standard attention as a C++ user would write it with
// OpenBLAS, materializing the Nq×Nk scores per head:
//   S = s·Q Kᵀ (sgemm), P = safe_softmax_row(S) with the causal mask (vectorized), O = P V (sgemm).
// Float16/bfloat16 tensors are converted to float32 around the two products, inside the timed call.
// Two threading arrangements; the benchmark times both and keeps the faster.
#ifndef FLASHATTN_BENCH_BASELINE_H_
#define FLASHATTN_BENCH_BASELINE_H_

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "flashattn/flashattn.h"

namespace flashattn::bench {

enum class BaselineArrangement : std::uint8_t {
  kHeadsParallel,  // one (batch, head) per thread, single-threaded BLAS
  kThreadedBlas,   // heads one after another, BLAS and the softmax rows on all threads
};
inline constexpr BaselineArrangement kAllArrangements[] = {BaselineArrangement::kHeadsParallel,
                                                           BaselineArrangement::kThreadedBlas};
std::string_view ToString(BaselineArrangement arrangement);

// How many scratch sets an arrangement needs over `units` independent problems (heads, or K/V-head groups):
// one when BLAS threads, else one per worker, min(threads, units).
int ArrangementWorkers(BaselineArrangement arrangement, int threads, std::int64_t units);

// Runs solve(unit, worker, row_threads) for every unit in [0, units). kThreadedBlas: in turn, with BLAS and
// the row operations on `threads` threads (worker 0). kHeadsParallel: ArrangementWorkers(...) units at once
// with single-threaded BLAS, `worker` the index of the thread.
void RunInArrangement(BaselineArrangement arrangement, int threads, std::int64_t units,
                      const std::function<void(std::int64_t unit, int worker, int row_threads)>& solve);

class BlasBaseline {
 public:
  // Allocates the scratch for `params` (which must outlive this object). Supports what the benchmark
  // varies: any shape, strides, GQA, causal, the three element types. Throws Error for params it does not
  // support (window, softcap, ALiBi, mask tensor, num_threads < 1) and for invalid params.
  BlasBaseline(const AttentionParams& params, BaselineArrangement arrangement);

  // Bytes of scratch the arrangement needs for `params` (the Nq×Nk scores dominate).
  static std::int64_t ScratchBytes(const AttentionParams& params, BaselineArrangement arrangement);

  // Writes params.o, and params.lse if set.
  void Run();

 private:
  struct Scratch {
    std::vector<float> S;           // Nq×Nk scores, then probabilities
    std::vector<float> q, k, v, o;  // float32 copies of one head when the element type is not float32
  };
  void Head(std::int64_t b, std::int64_t h, Scratch& scratch, int row_threads) const;

  const AttentionParams& params_;
  BaselineArrangement arrangement_;
  int threads_;
  float scale_;
  std::vector<Scratch> scratch_;  // one per worker
};

}  // namespace flashattn::bench

#endif  // FLASHATTN_BENCH_BASELINE_H_
