// The block-sparse cases of the forward and backward modes (--sparse, bench_case.h's Sparsity): their block
// masks and document ids, the dense call they are timed against, and the note of their rows.
#ifndef FLASHATTN_BENCH_SPARSE_H_
#define FLASHATTN_BENCH_SPARSE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "bench/bench_case.h"
#include "flashattn/flashattn.h"

namespace flashattn::bench {

// The block mask and document ids of a --sparse case, owned: 8 documents of equal length, causal within each
// (create_block_mask, blocks of 128), or a causal window of 512 keys with the first 64 keys global (blocks of
// 64: create_block_mask's window, and key block 0 full for every later query block).
class SparseInputs {
 public:
  explicit SparseInputs(const BenchCase& c);
  // Sets the case's block mask and the predicates its partial blocks apply (causal, window, documents).
  void Apply(AttentionParams* p) const;
  // The listed (partial or full) blocks over all blocks of the call.
  double VisitedFraction() const;

 private:
  Sparsity sparsity_;
  BlockMaskLists lists_;
  std::vector<std::int32_t> documents_;
};

// The dense call of the same shape: no block mask, document ids, causal mask or window.
AttentionParams DenseParams(AttentionParams p);

// "dense 12.5 ms; visited 0.126 of blocks; time/(visited·dense) 1.31; time − visited·dense = 3.91% of dense":
// the ratio, and the cost beyond the visited share as a part of the dense time (what the call spends whatever
// it visits: reading Q, K and V and writing O, setting up each query block).
std::string SparseNote(double median_ms, double dense_median_ms, double visited);

}  // namespace flashattn::bench

#endif  // FLASHATTN_BENCH_SPARSE_H_
