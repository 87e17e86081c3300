// The roofline of a decode call: the least time its memory traffic and its arithmetic allow on this machine,
//   T_roof = max(B / β, T_arith),   T_arith = F_scores / φ_scores + F_pv / φ_pv,
// where B is the bytes the call must move (CountBytesRead), β the read bandwidth measured in the same run,
// F_scores and F_pv the multiply-adds of S = QKᵀ and of P̃V as operations (CountDecodeFlops), and φ the measured
// peak of the instructions each product runs on: float32 FMAs, or the int8 dot products for integer scores
// (quantize_query_int8) and integer P̃V (quantize_probs_u8; where the target forms it on float FMAs,
// measure::Int8DotPeak::integer_pv is false, its FMA peak). A call's roofline fraction is T_roof / T for its
// median time T: 1 is as fast as the machine allows.
#ifndef FLASHATTN_BENCH_ROOFLINE_H_
#define FLASHATTN_BENCH_ROOFLINE_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string_view>

#include "bench/bench_case.h"

namespace flashattn::bench {

// What binds: the memory traffic, or the arithmetic, all on FMAs, all on int8 dot products, or on both.
enum class RooflineBound : std::uint8_t { kBandwidth, kFma, kInt8Dot, kMixed };

// "bandwidth", "fma", "int8 dot", "mixed".
std::string_view ToString(RooflineBound bound);

// The machine's limits measured in the run, 0 where not measured.
struct MachineLimits {
  double read_gbs = 0;       // β
  double fma_gflops = 0;     // φ of float arithmetic
  double int8_dot_gops = 0;  // φ of integer arithmetic
  bool integer_pv = true;    // whether integer P̃V runs on the int8 dot products (else on FMAs)
};

struct Roofline {
  double memory_ms = 0;      // B / β
  double arithmetic_ms = 0;  // T_arith
  RooflineBound bound = RooflineBound::kBandwidth;

  double ms() const { return std::max(memory_ms, arithmetic_ms); }
};

// The roofline of decode case `c`; nullopt when a limit it needs is 0 (not measured).
std::optional<Roofline> DecodeRoofline(const BenchCase& c, const MachineLimits& limits);

}  // namespace flashattn::bench

#endif  // FLASHATTN_BENCH_ROOFLINE_H_
