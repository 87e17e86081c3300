// `flashattn bench --mode forward`: times flashattn::forward on random inputs, then the BLAS baseline on the
// same inputs, and reports one row.
#ifndef FLASHATTN_BENCH_FORWARD_MODE_H_
#define FLASHATTN_BENCH_FORWARD_MODE_H_

#include "bench/bench_case.h"
#include "bench/mode_common.h"
#include "bench/report.h"

namespace flashattn::bench {

Row RunForward(const BenchCase& c, const RunOptions& options, const Limits& limits);

}  // namespace flashattn::bench

#endif  // FLASHATTN_BENCH_FORWARD_MODE_H_
