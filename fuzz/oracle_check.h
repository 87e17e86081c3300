// The numerical check of the fuzz targets: a computed O and LSE against the float64 oracle
// (reference::OracleHeadRows), element by element, within an a-priori rounding-error bound of each row.
//
// Why not the kernel tests' "at most twice the error of `standard`": on fuzzed shapes `standard` is often
// exact (one key, V rows equal), so twice its error is zero and any rounding fails. Instead, per query row i
// with visible keys j (u = 2⁻²⁴, the float32 unit roundoff):
//   A_i  = max_j |s|·Σ_c |q_ic k_jc|     the size of the dot products before rounding
//   M_i  = max_j |S_ij|                   the size of the scores
//   δS_i = u·((d + 4)·A_i + 16·(M_i + 1) + 4·softcap) + u_S·(M_i + 1) + q_error·max_j |s|·Σ_c q_bound_ic·|k_jc|
//          (worst-case dot-product rounding, scale, softcap's tanh, bias terms, the max subtraction, the
//          vector exp's 2 ulp; u_S where S is stored in the element type (`standard`); the last term is for
//          queries the kernel computes itself, e.g. rotary q: each element within q_error·q_bound_ic of the
//          exact query given to the oracle)
//   |O_ic − O*_ic| ≤ 2·(2·δS_i + (Nk + 16)·u + 2·n_O·u_out)·V_i / (1 − p_drop)   with V_i = max |v_jc|
//          (n_O: how often O is rounded to its type, once per K/V block in `flash1`)
//   |LSE_i − LSE*_i| ≤ 2·(δS_i + (Nk + 16)·u) + 4·u·|LSE*_i|
// (first order in δS; the factor 2 covers the second-order terms while δS_i ≤ 1/4, beyond which the row is
// only required to be finite). u_out is the unit roundoff of the output type (2⁻¹¹ float16, 2⁻⁸ bfloat16).
// A kernel that multiplies V by rounded weights (DecodeParams::quantize_probs_u8) adds n_i·e_w·V_i to the O
// bound, n_i the keys row i sees and e_w the weights' error relative to the largest weight of their block
// (P̃ ≤ 1 and l ≥ 1, so each key moves O by at most e_w·V_i).
// A row that sees no key must be exactly 0 with LSE = −inf. Any wrong key, mask, scale or missing rescale
// gives errors of order V_i, far above the bound.
#ifndef FLASHATTN_FUZZ_ORACLE_CHECK_H_
#define FLASHATTN_FUZZ_ORACLE_CHECK_H_

#include <string>

#include "flashattn/flashattn.h"

namespace flashattn::fuzz {

// What the computation rounds besides float32 arithmetic.
struct Rounding {
  DType output = DType::kF32;         // O's element type
  double stored_scores = 0.0;         // unit roundoff of S and P where the algorithm stores them (standard)
  std::int64_t output_roundings = 1;  // times O is rounded to its type (flash1: once per K/V block)
  double q_error = 0.0;               // queries computed by the kernel (rotary): see q_bound
  const float* q_bound = nullptr;     // float32 laid out like params.q (params.dtype must then be float32)
  double weight_error = 0.0;          // e_w: P̃V from weights rounded within e_w of their block's largest
  // e_w applies to the largest value of each visible key's K row (all d features) rather than of its V row:
  // V read inside K rows whose one scale covers the whole row
  bool weights_over_key_rows = false;
};

// Compares params.o (and params.lse, if set) with the oracle over params' own inputs. Returns an empty
// string if every element is within the bound, otherwise a description of the first one that is not.
std::string CheckAgainstOracle(const AttentionParams& params, const Rounding& rounding);

// Prints `what` and the failure and aborts: libFuzzer records the input as a crash.
[[noreturn]] void Fail(const std::string& what);

}  // namespace flashattn::fuzz

#endif  // FLASHATTN_FUZZ_ORACLE_CHECK_H_
