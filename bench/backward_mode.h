// `flashattn bench --mode backward`: runs flashattn::forward once (untimed) for O and LSE, then times
// flashattn::backward on random dO, then the OpenBLAS standard backward on the same inputs, and reports one
// row with 2.5× the forward's FLOPs. --report-memory gives the peak resident growth of the first call
// beyond the caller's tensors (Q, K, V, O, LSE, dO, dQ, dK, dV).
#ifndef FLASHATTN_BENCH_BACKWARD_MODE_H_
#define FLASHATTN_BENCH_BACKWARD_MODE_H_

#include "bench/bench_case.h"
#include "bench/mode_common.h"
#include "bench/report.h"

namespace flashattn::bench {

Row RunBackward(const BenchCase& c, const RunOptions& options, const Limits& limits);

}  // namespace flashattn::bench

#endif  // FLASHATTN_BENCH_BACKWARD_MODE_H_
