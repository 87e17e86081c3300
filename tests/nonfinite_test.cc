// Non-finite data is not an error (docs/robustness.md): NaN or ±inf in Q, K or V flows into exactly the outputs that
// IEEE arithmetic sends it to, and nowhere else. For row i of head h and its visible keys V(i):
//   S_ij = s·q_i·k_j,  m_i = max_j S_ij,  P_ij = exp(S_ij − m_i),  l_i = Σ_j P_ij,  O_i = Σ_j P_ij v_j / l_i
// - NaN in q_i: every S_ij is NaN, so O_i and LSE_i are NaN (if V(i) is not empty); other rows are untouched.
// - NaN in k_j: S_ij is NaN for every row that sees j, whose O and LSE become NaN; a row that cannot see j
//   (causal, window) never forms S_ij and is bitwise the result without the NaN.
// - NaN (or +inf) in v_j[c]: only column c of the rows that see j becomes NaN (+inf, since every P_ij > 0
//   here); LSE does not depend on V and every other column is untouched.
// - +inf in k_j[c]: S_ij = ±inf with the sign of q_i[c]. +inf makes m_i = +inf and P_ij = exp(inf − inf) =
//   NaN: the row is NaN. −inf gives P_ij = 0: the row is attention without key j (the float64 oracle agrees).
// - Every visible score −inf: LSE = −∞ and O_i = Σ_j 0·v_j, which is 0 as for a row without keys
//   (docs/algorithms.md §6) unless a seen v_j holds inf or NaN (an additive mask's −∞ is arithmetic: its keys are seen).
// - softcap c·tanh(S/c) maps ±inf scores to ±c: every row is finite and agrees with the oracle.
// Checked for the fused kernel on every compiled SIMD target (default tiles and small forced ones, so that
// the key lies inside a partly masked tile), for the references (oracle, standard, flash1, flash2) and for
// decode(); memory a call does not read (cache slots
// beyond cache_seqlens) may hold NaN without effect. backward(): a NaN reaches the gradients of the pairs
// (i, j) it touches among those that take part (row i sees key j and saw some key), and nothing else; the
// derivation is above its tests below.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "backward_test_problem.h"
#include "common/element.h"
#include "decode_test_case.h"
#include "flashattn/backward.h"
#include "flashattn/decode.h"
#include "reference/reference.h"
#include "simd/targets.h"
#include "test_problem.h"
#include "test_targets.h"

namespace flashattn::testing {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

// Query row i sees key j (bottom-right aligned, docs/algorithms.md §6).
bool Sees(const AttentionParams& p, std::int64_t i, std::int64_t j) {
  const std::int64_t diagonal = i + p.seqlen_k - p.seqlen_q;
  if (p.causal && j > diagonal) return false;
  if (p.window_left >= 0 && j < diagonal - p.window_left) return false;
  if (p.window_right >= 0 && j > diagonal + p.window_right) return false;
  return true;
}
// ... and the boolean mask, if any, keeps (i, j) for query head h of batch b.
bool SeesThroughMask(const AttentionParams& p, std::int64_t b, std::int64_t h, std::int64_t i,
                     std::int64_t j) {
  if (!Sees(p, i, j)) return false;
  if (p.mask.kind != MaskKind::kBool) return true;
  const auto* keep = static_cast<const std::uint8_t*>(p.mask.data);
  return keep[b * p.mask.stride_batch + h * p.mask.stride_head + i * p.mask.stride_row +
              j * p.mask.stride_col] != 0;
}
bool SeesAnyKey(const AttentionParams& p, std::int64_t b, std::int64_t h, std::int64_t i) {
  for (std::int64_t j = 0; j < p.seqlen_k; ++j)
    if (SeesThroughMask(p, b, h, i, j)) return true;
  return false;
}

// What one output row must be, given the clean run's row.
enum class Expect { kClean, kAllNaN, kColumnNaN, kColumnInf, kEmptyRow, kOracle };

struct Injection {
  std::string name;
  // Applied to both problems (e.g. fixing signs), then only to the injected one.
  std::function<void(Problem&)> prepare, inject;
  std::function<Expect(const AttentionParams&, std::int64_t b, std::int64_t h, std::int64_t i)> expect;
  std::int64_t column = -1;  // for kColumnNaN / kColumnInf
};

constexpr std::int64_t kB = 1, kJ = 29, kHk = 1, kC = 5,
                       kI = 30;  // the injected batch, key, K/V head, column, row

std::vector<Injection> Injections() {
  auto group = [](const AttentionParams& p, std::int64_t h) { return h / (p.heads_q / p.heads_kv); };
  auto sees_key = [=](const AttentionParams& p, std::int64_t b, std::int64_t h, std::int64_t i) {
    return b == kB && group(p, h) == kHk && SeesThroughMask(p, b, h, i, kJ);
  };
  auto no_sign = [](Problem&) {};
  // q_i[kC] = ±0.5 alternating over rows and heads, so +inf in k_j[kC] gives scores of both signs.
  auto alternate_q_signs = [](Problem& x) {
    for (std::int64_t i = 0; i < x.shape().Nq; ++i)
      for (std::int64_t h = 0; h < x.shape().Hq; ++h) x.SetQ(kB, i, h, kC, (i + h) % 2 == 0 ? 0.5f : -0.5f);
  };
  return {
      {"nan_in_q", no_sign, [](Problem& x) { x.SetQ(kB, kI, 2, kC, kNaN); },
       [](const AttentionParams& p, std::int64_t b, std::int64_t h, std::int64_t i) {
         if (b != kB || h != 2 || i != kI) return Expect::kClean;
         return SeesAnyKey(p, b, h, i) ? Expect::kAllNaN : Expect::kClean;
       }},
      {"nan_in_k", no_sign, [](Problem& x) { x.SetK(kB, kJ, kHk, kC, kNaN); },
       [=](const AttentionParams& p, std::int64_t b, std::int64_t h, std::int64_t i) {
         return sees_key(p, b, h, i) ? Expect::kAllNaN : Expect::kClean;
       }},
      {"nan_in_v", no_sign, [](Problem& x) { x.SetV(kB, kJ, kHk, kC, kNaN); },
       [=](const AttentionParams& p, std::int64_t b, std::int64_t h, std::int64_t i) {
         return sees_key(p, b, h, i) ? Expect::kColumnNaN : Expect::kClean;
       },
       kC},
      {"plus_inf_in_v", no_sign, [](Problem& x) { x.SetV(kB, kJ, kHk, kC, kInf); },
       [=](const AttentionParams& p, std::int64_t b, std::int64_t h, std::int64_t i) {
         return sees_key(p, b, h, i) ? Expect::kColumnInf : Expect::kClean;
       },
       kC},
      {"plus_inf_in_k", alternate_q_signs, [](Problem& x) { x.SetK(kB, kJ, kHk, kC, kInf); },
       [=](const AttentionParams& p, std::int64_t b, std::int64_t h, std::int64_t i) {
         if (!sees_key(p, b, h, i)) return Expect::kClean;
         if (p.softcap > 0.0f) return Expect::kOracle;  // ±inf scores capped to ±c
         return (i + h) % 2 == 0 ? Expect::kAllNaN : Expect::kOracle;
       }},
      // q_i[kC] = +inf against k_j[kC] = −1 for every key j of the group: all of row kI's scores are −inf.
      {"every_score_minus_inf",
       [](Problem& x) {
         for (std::int64_t j = 0; j < x.shape().Nk; ++j) x.SetK(kB, j, kHk, kC, -1.0f);
       },
       [](Problem& x) { x.SetQ(kB, kI, 2, kC, kInf); },
       [](const AttentionParams& p, std::int64_t b, std::int64_t h, std::int64_t i) {
         if (b != kB || h != 2 || i != kI) return Expect::kClean;
         if (p.softcap > 0.0f) return Expect::kOracle;
         return Expect::kEmptyRow;
       }},
  };
}

// What is wrong with one output row of `x` (compared with the clean run's row), or "" if nothing.
std::string RowError(const Problem& x, const Problem& clean, const Problem& oracle, Expect expect,
                     std::int64_t column, std::int64_t b, std::int64_t h, std::int64_t i) {
  const double o_tolerance = x.shape().dtype == DType::kF32 ? 1e-5 : 4e-3;
  auto describe = [](const char* what, std::int64_t c, float got, const char* wanted) {
    return std::string(what) + (c >= 0 ? " column " + std::to_string(c) : std::string()) + " is " +
           std::to_string(got) + ", expected " + wanted;
  };
  for (std::int64_t c = 0; c < x.shape().dv; ++c) {
    const float o = x.O(b, i, h, c), o_clean = clean.O(b, i, h, c);
    const bool in_column = c == column;
    switch (expect) {
      case Expect::kAllNaN:
        if (!std::isnan(o)) return describe("O", c, o, "NaN");
        break;
      case Expect::kColumnNaN:
        if (in_column && !std::isnan(o)) return describe("O", c, o, "NaN");
        if (!in_column && !SameBits(o, o_clean)) return describe("O", c, o, "the clean result");
        break;
      case Expect::kColumnInf:
        if (in_column && o != kInf) return describe("O", c, o, "+inf");
        if (!in_column && !SameBits(o, o_clean)) return describe("O", c, o, "the clean result");
        break;
      case Expect::kEmptyRow:
        if (o != 0.0f) return describe("O", c, o, "0 (no visible key)");
        break;
      case Expect::kOracle:
        if (!(std::fabs(o - oracle.O(b, i, h, c)) <= o_tolerance)) return describe("O", c, o, "the oracle's");
        break;
      case Expect::kClean:
        if (!SameBits(o, o_clean)) return describe("O", c, o, "the clean result");
        break;
    }
  }
  const float lse = x.Lse(b, h, i), lse_clean = clean.Lse(b, h, i), lse_oracle = oracle.Lse(b, h, i);
  switch (expect) {
    case Expect::kClean:
    case Expect::kColumnNaN:
    case Expect::kColumnInf:
      if (!SameBits(lse, lse_clean)) return describe("LSE", -1, lse, "the clean result");
      break;
    case Expect::kAllNaN:
      if (!std::isnan(lse)) return describe("LSE", -1, lse, "NaN");
      break;
    case Expect::kEmptyRow:
      if (lse != -kInf) return describe("LSE", -1, lse, "-inf");
      break;
    case Expect::kOracle:
      if (!(std::fabs(lse - lse_oracle) <= 1e-4 * std::max(1.0f, std::fabs(lse_oracle)))) {
        return describe("LSE", -1, lse, "the oracle's");
      }
      break;
  }
  return "";
}

// Runs the injection with each algorithm, the fused kernel on every compiled target; one failure per run
// names the wrong rows' count and the first.
void RunCase(const Shape& shape, const Modifiers& mods, std::int64_t block_rows, std::int64_t block_cols,
             const Injection& injection, const std::vector<Algorithm>& algorithms) {
  Problem clean(shape, mods, 5), x(shape, mods, 5), oracle(shape, mods, 5);
  for (Problem* p : {&clean, &x, &oracle}) {
    injection.prepare(*p);
    p->params().tiling.block_rows = block_rows;
    p->params().tiling.block_cols = block_cols;
    p->params().num_threads = 1;  // many small calls: no thread team start-up each time
  }
  injection.inject(x);
  injection.inject(oracle);
  forward(oracle.params(), Algorithm::kOracle);
  auto check = [&](Algorithm algorithm, const std::string& label) {
    clean.ResetOutputs();
    x.ResetOutputs();
    forward(clean.params(), algorithm);
    forward(x.params(), algorithm);
    std::int64_t wrong_rows = 0;
    std::string first;
    for (std::int64_t b = 0; b < shape.batch; ++b)
      for (std::int64_t h = 0; h < shape.Hq; ++h)
        for (std::int64_t i = 0; i < shape.Nq; ++i) {
          const std::string error =
              RowError(x, clean, oracle, injection.expect(x.params(), b, h, i), injection.column, b, h, i);
          if (error.empty()) continue;
          if (wrong_rows++ == 0) {
            first = "row (b, h, i) = (" + std::to_string(b) + ", " + std::to_string(h) + ", " +
                    std::to_string(i) + "): " + error;
          }
        }
    EXPECT_EQ(wrong_rows, 0) << label << ": " << wrong_rows << " wrong rows, first " << first;
  };
  for (Algorithm algorithm : algorithms) {
    if (algorithm != Algorithm::kFused) {
      check(algorithm, std::string(to_string(algorithm)));
      continue;
    }
    for (std::int64_t target : TargetsUnderTest()) {
      simd::RestrictTargetForTest(target);
      check(algorithm, "fused on " + simd::TargetName(target));
    }
    simd::RestrictTargetForTest(0);
  }
}

// Row kI = 30 of 37 sees keys ≤ 30 + 53 − 37 = 46 under the causal mask, so key kJ = 29 is visible to rows
// 13..36 only; the window (8, 2) shows it to rows 11..21 only, and row kI = 30 sees keys 38..48 (not kJ).
Shape InjectionShape(DType dtype) {
  return {.batch = 2, .Nq = 37, .Nk = 53, .Hq = 4, .Hkv = 2, .d = 24, .dv = 20, .dtype = dtype};
}

// Runs the named injections under the given modifiers, default and small tiles, with each algorithm.
void RunInjections(DType dtype, const std::vector<std::string>& names,
                   const std::vector<Modifiers>& modifiers,
                   const std::vector<Algorithm>& algorithms = {Algorithm::kFused}) {
  const Shape shape = InjectionShape(dtype);
  for (const Injection& injection : Injections()) {
    if (std::find(names.begin(), names.end(), injection.name) == names.end()) continue;
    for (const Modifiers& mods : modifiers) {
      for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{0, 0}, {8, 16}}) {
        SCOPED_TRACE(injection.name + " " + mods.ToString() + " tiles " + std::to_string(rows) + "x" +
                     std::to_string(cols));
        RunCase(shape, mods, rows, cols, injection, algorithms);
      }
    }
  }
}

const std::vector<Modifiers> kAllModifiers = {
    {}, {.causal = true}, {.window_left = 8, .window_right = 2}, {.softcap = 4.0f}};
const std::vector<Modifiers> kUnmasked = {{}, {.softcap = 4.0f}};

TEST(NonFiniteFused, Float32QAndKInjectionsReachExactlyTheRowsThatSeeThem) {
  RunInjections(DType::kF32, {"nan_in_q", "nan_in_k", "plus_inf_in_k", "every_score_minus_inf"},
                kAllModifiers);
}

TEST(NonFiniteFused, Float32VInjectionsReachOneColumnOfEveryRowWithoutMasks) {
  RunInjections(DType::kF32, {"nan_in_v", "plus_inf_in_v"}, kUnmasked);
}

TEST(NonFiniteFused, Float16QInjectionsReachExactlyTheirRow) {
  RunInjections(DType::kF16, {"nan_in_q", "every_score_minus_inf"}, kAllModifiers);
}

TEST(NonFiniteFused, BFloat16InjectionsReachExactlyTheRowsThatSeeThem) {
  RunInjections(DType::kBF16, {"nan_in_q", "nan_in_k", "plus_inf_in_k", "every_score_minus_inf"},
                kAllModifiers);
  RunInjections(DType::kBF16, {"nan_in_v", "plus_inf_in_v"}, kAllModifiers);
}

// A tile that holds a key some rows cannot see used to multiply their P_ij = 0 by v_j (0·NaN = NaN), so a
// NaN or inf in v_j reached rows that cannot see key j; such tiles now leave the hidden keys out when V_j is
// not all finite (AccumulateSeenKeys).
TEST(NonFiniteFused, VInjectionsDoNotReachRowsThatCannotSeeTheKey) {
  for (DType dtype : {DType::kF32, DType::kF16}) {
    RunInjections(dtype, {"nan_in_v", "plus_inf_in_v"},
                  {{.causal = true}, {.window_left = 8, .window_right = 2}, {.mask = MaskKind::kBool}});
  }
}

// On targets without F16C (SSE4, SSSE3, SCALAR) Highway's emulated float16 widening turned inf and NaN into
// finite values of 65536..131008; LoadF32 now corrects the exponent-31 lanes there.
TEST(NonFiniteFused, Float16KAndVInjectionsOnEveryTarget) {
  RunInjections(DType::kF16, {"nan_in_k", "plus_inf_in_k"}, kAllModifiers);
  RunInjections(DType::kF16, {"nan_in_v", "plus_inf_in_v"}, kUnmasked);
}

// The reference algorithms follow the same rule, with the boolean mask too. They used to take a row of NaN
// scores for a row without keys (std::max(−∞, NaN) is −∞: O = 0, LSE = −∞; the oracle), and to multiply the
// P_ij = 0 of a key the row does not see by v_j (0·NaN = NaN in rows that cannot see key j; all four).
const std::vector<Algorithm> kReferences = {Algorithm::kOracle, Algorithm::kStandard, Algorithm::kFlash1,
                                            Algorithm::kFlash2};
const std::vector<Modifiers> kAllModifiersAndBoolMask = {{},
                                                         {.causal = true},
                                                         {.window_left = 8, .window_right = 2},
                                                         {.softcap = 4.0f},
                                                         {.mask = MaskKind::kBool}};

// Float32 only: standard keeps S and P in the element type, too coarse for the rows compared with the oracle.
TEST(NonFiniteReference, Float32QAndKInjectionsReachExactlyTheRowsThatSeeThem) {
  RunInjections(DType::kF32, {"nan_in_q", "nan_in_k", "plus_inf_in_k", "every_score_minus_inf"},
                kAllModifiersAndBoolMask, kReferences);
}

TEST(NonFiniteReference, VInjectionsReachOneColumnOfTheRowsThatSeeTheKey) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    RunInjections(dtype, {"nan_in_v", "plus_inf_in_v"}, kAllModifiersAndBoolMask, kReferences);
  }
}

// A row whose every score is −∞ through the additive mask has no weight: O = 0 and LSE = −∞, like a row
// without keys. Its keys are seen, though, and the mask's −∞ is arithmetic: P_ij = 0 multiplies v_j, so a NaN
// in v_j[c] makes column c of that row NaN, as in every other row that sees key j.
TEST(NonFinite, ARowOfMinusInfinityUnderTheAdditiveMaskStillMultipliesItsValues) {
  const Injection injection{
      "nan_in_v_row_of_minus_inf",
      [](Problem& x) {  // row kI of query head 2 all −∞, in the mask buffer that x owns
        const MaskTensor& mask = x.params().mask;
        float* bias = const_cast<float*>(static_cast<const float*>(mask.data));
        std::fill_n(bias + 2 * mask.stride_head + kI * mask.stride_row, x.shape().Nk, -kInf);
      },
      [](Problem& x) { x.SetV(kB, kJ, kHk, kC, kNaN); },
      [](const AttentionParams& p, std::int64_t b, std::int64_t h, std::int64_t i) {
        const bool sees_key = b == kB && h / (p.heads_q / p.heads_kv) == kHk && Sees(p, i, kJ);
        return sees_key ? Expect::kColumnNaN : Expect::kClean;
      },
      kC};
  for (DType dtype : {DType::kF32, DType::kF16}) {
    for (const Modifiers& mods : {Modifiers{.mask = MaskKind::kAdditive},
                                  Modifiers{.causal = true, .mask = MaskKind::kAdditive}}) {
      for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{0, 0}, {8, 16}}) {
        SCOPED_TRACE(mods.ToString() + " " + std::string(to_string(dtype)) + " tiles " + std::to_string(rows) +
                     "x" + std::to_string(cols));
        RunCase(InjectionShape(dtype), mods, rows, cols, injection,
                {Algorithm::kFused, Algorithm::kOracle, Algorithm::kStandard, Algorithm::kFlash1,
                 Algorithm::kFlash2});
      }
    }
  }
}

// ---- decode
// ---------------------------------------------------------------------------------------------------

void StoreCache(void* cache, const DecodeCase& c, std::int64_t b, std::int64_t j, std::int64_t hk,
                std::int64_t e, float value) {
  StoreFromFloat(static_cast<std::uint16_t*>(cache), c.shape().dtype, c.CacheOffset(b, j, hk) + e, value);
}

// The expectations of a NaN at (b0 = 1, key 21 − 2, K/V head 0, feature e0 = 7) in the k or v cache of the
// case below (two sequences, 3 causal queries at positions cached − 3 + i, 4 query heads over 2 K/V heads):
// queries 1 and 2 of that sequence and K/V head see it; their LSE (NaN in k) and O (every feature for k,
// feature e0 for v) are NaN, and every other element is bitwise the clean result.
constexpr std::int64_t kCacheNaNBatch = 1, kCacheNaNKey = 21 - 2, kCacheNaNHeadKv = 0, kCacheNaNFeature = 7;

void ExpectNaNReachesOnlyTheQueriesThatSeeIt(const DecodeCase& clean, const DecodeCase& x, bool in_v,
                                             const std::string& label) {
  // Wrong elements: a NaN expected but not found, a clean value expected but changed.
  std::int64_t missing_nan = 0, changed = 0;
  std::string first_missing, first_changed;
  auto note = [](std::int64_t& count, std::string& first, const std::string& where) {
    if (count++ == 0) first = where;
  };
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t i = 0; i < 3; ++i)
      for (std::int64_t h = 0; h < 4; ++h) {
        const bool sees = b == kCacheNaNBatch && h / 2 == kCacheNaNHeadKv && i >= 1;
        const std::string row =
            "(b, i, h) = (" + std::to_string(b) + ", " + std::to_string(i) + ", " + std::to_string(h) + ")";
        for (std::int64_t e = 0; e < 16; ++e) {
          const float o = x.O(b, i, h, e);
          const std::string where = "O" + row + "[" + std::to_string(e) + "] = " + std::to_string(o);
          if (sees && (!in_v || e == kCacheNaNFeature)) {
            if (!std::isnan(o)) note(missing_nan, first_missing, where);
          } else if (!SameBits(o, clean.O(b, i, h, e))) {
            note(changed, first_changed, where);
          }
        }
        const float lse = x.Lse(b, h, i);
        const std::string where = "LSE" + row + " = " + std::to_string(lse);
        if (sees && !in_v) {
          if (!std::isnan(lse)) note(missing_nan, first_missing, where);
        } else if (!SameBits(lse, clean.Lse(b, h, i))) {
          note(changed, first_changed, where);
        }
      }
  EXPECT_EQ(missing_nan, 0) << label << ": NaN expected, first " << first_missing;
  EXPECT_EQ(changed, 0) << label << ": clean result expected, first " << first_changed;
}

// The case of ExpectNaNReachesOnlyTheQueriesThatSeeIt: a clean cache and one with the NaN in k or v, each run
// through `attend` (the kernel or the reference decode) with 1 and 3 splits.
void RunCacheNaNCase(std::int64_t page_size, DType dtype, bool in_v,
                     const std::function<void(DecodeParams&)>& attend) {
  const DecodeShape shape{.Nq = 3, .Hq = 4, .Hkv = 2, .d = 16, .Nmax = 40, .cached = {37, 21}, .dtype = dtype,
                          .page_size = page_size};
  DecodeCase clean(shape, DecodeMods{.causal = true}, 3), x(shape, DecodeMods{.causal = true}, 3);
  StoreCache(in_v ? x.params().v_cache : x.params().k_cache, x, kCacheNaNBatch, kCacheNaNKey, kCacheNaNHeadKv,
             kCacheNaNFeature, kNaN);
  for (std::int64_t splits : {1, 3}) {
    clean.params().num_splits = x.params().num_splits = splits;
    attend(clean.params());
    attend(x.params());
    ExpectNaNReachesOnlyTheQueriesThatSeeIt(clean, x, in_v, "num_splits " + std::to_string(splits));
  }
}

std::string CacheNaNLabel(std::int64_t page_size, DType dtype, bool in_v) {
  return std::string(in_v ? "v_cache" : "k_cache") + (page_size ? " paged" : " contiguous") +
         (dtype == DType::kF16 ? " f16" : " f32");
}

// (A NaN key used to be swallowed by the merge of the split partials, std::max dropping a NaN LSE; a NaN
// value reached query 0, which cannot see it, as 0·NaN in P·V.)
// On every compiled target, float32 and float16 caches (emulated float16 widening must keep the NaN): R = 6
// rows take the kernel's direct path where one register tile holds them (AVX-512), the widened one elsewhere.
TEST(NonFiniteDecode, NaNInTheCacheReachesOnlyTheQueriesThatSeeIt) {
  for (const std::int64_t target : TargetsUnderTest()) {
    for (const auto [page_size, dtype] : {std::pair<std::int64_t, DType>{0, DType::kF32}, {4, DType::kF32},
                                          {0, DType::kF16}, {4, DType::kF16}}) {
      for (bool in_v : {false, true}) {
        simd::RestrictTargetForTest(target);
        SCOPED_TRACE(CacheNaNLabel(page_size, dtype, in_v) + " on " + simd::TargetName(target));
        RunCacheNaNCase(page_size, dtype, in_v, [](DecodeParams& params) { decode(params); });
      }
    }
  }
  simd::RestrictTargetForTest(0);
}

// The reference decode under the same expectations: it is the oracle the kernel is held to. (It used to
// drop a NaN score in its maximum and in the merge of its chunks, std::max(−∞, NaN) being −∞, and to form
// 0·NaN for a value its row does not see.)
TEST(NonFiniteDecode, TheReferenceDecodeFollowsTheSameRule) {
  for (const auto [page_size, dtype] : {std::pair<std::int64_t, DType>{0, DType::kF32}, {4, DType::kF16}}) {
    for (bool in_v : {false, true}) {
      SCOPED_TRACE(CacheNaNLabel(page_size, dtype, in_v));
      RunCacheNaNCase(page_size, dtype, in_v, [](DecodeParams& params) {
        validate(params);
        reference::Decode(params);
      });
    }
  }
}

// Cache slots at or beyond cache_seqlens[b] are not part of the sequence: NaN there changes nothing.
TEST(NonFiniteDecode, NaNBeyondTheCachedLengthIsNeverRead) {
  for (std::int64_t page_size : {0, 4}) {
    SCOPED_TRACE(page_size ? "paged" : "contiguous");
    const DecodeShape shape{
        .Nq = 2, .Hq = 4, .Hkv = 2, .d = 16, .Nmax = 40, .cached = {37, 21}, .page_size = page_size};
    DecodeCase clean(shape, DecodeMods{}, 4), x(shape, DecodeMods{}, 4);
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t j = shape.cached[b]; j < shape.Nmax; ++j)
        for (std::int64_t hk = 0; hk < 2; ++hk)
          for (std::int64_t e = 0; e < 16; ++e) {
            StoreCache(x.params().k_cache, x, b, j, hk, e, kNaN);
            StoreCache(x.params().v_cache, x, b, j, hk, e, kNaN);
          }
    decode(clean.params());
    decode(x.params());
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t i = 0; i < 2; ++i)
        for (std::int64_t h = 0; h < 4; ++h) {
          for (std::int64_t e = 0; e < 16; ++e) EXPECT_TRUE(SameBits(x.O(b, i, h, e), clean.O(b, i, h, e)));
          EXPECT_TRUE(SameBits(x.Lse(b, h, i), clean.Lse(b, h, i)));
        }
  }
}

// ---- backward
// ---------------------------------------------------------------------------------------------------

// backward() validates the LSE (finite or −∞), so each NaN goes in after the forward pass: O and LSE are the
// clean inputs' throughout. A pair (h, i, j) takes part when row i of query head h sees key j (band, boolean
// mask) and saw some key (LSE_i > −∞); it follows IEEE arithmetic, an additive mask's −∞ included (P_ij = 0,
// and 0·NaN = NaN). A pair that does not take part contributes nothing, not even 0·NaN. With
//   P_ij = e^{S_ij − LSE_i},  dS_ij = P_ij (dO_i·v_j − D_i),  D_i = dO_i·O_i,
//   dQ_i = s Σ_j dS_ij k_j,   dK_j = s Σ_i dS_ij q_i,      dV_j = Σ_i P_ij dO_i,
// a NaN in
// - q_i makes S_ij, P_ij and dS_ij NaN for the keys j row i sees: dQ_i, and dK_j and dV_j of those keys;
// - k_j does the same for the rows i that see j, in every query head of its group;
// - v_j makes dS_ij NaN (P_ij stays finite) for the rows i that see j: their dQ_i, and dK_j; dV reads no V;
// - dO_i[c] makes D_i and dS_ij NaN for the keys j row i sees: dQ_i and their dK_j, and column c of their
//   dV_j;
// - O_i[c] of every row i that sees key j (as a forward pass with a NaN in v_j[c] leaves O, V clean again)
//   makes D_i and dS_ij NaN for the keys those rows see: their dQ_i and those keys' dK_j.
// Every other gradient element is bitwise the result without the NaN.
enum class Operand { kQ, kK, kV, kDO, kO };
struct BackwardNaN {
  std::string name;
  Operand operand;
  std::int64_t head, row;  // a query head and row for q and dO, a K/V head and key for k, v and O
};
constexpr std::int64_t kNaNColumn = 3;

void Inject(BackwardProblem& x, const BackwardNaN& nan) {
  switch (nan.operand) {
    case Operand::kQ: return x.forward().SetQ(0, nan.row, nan.head, kNaNColumn, kNaN);
    case Operand::kK: return x.forward().SetK(0, nan.row, nan.head, kNaNColumn, kNaN);
    case Operand::kV: return x.forward().SetV(0, nan.row, nan.head, kNaNColumn, kNaN);
    case Operand::kDO: return x.SetDO(0, nan.row, nan.head, kNaNColumn, kNaN);
    case Operand::kO: {
      const AttentionParams& a = x.forward().params();
      const std::int64_t at = nan.row * a.v_strides.seq + nan.head * a.v_strides.head + kNaNColumn;
      const float v = LoadAsFloat(a.v, a.dtype, at);
      x.forward().SetV(0, nan.row, nan.head, kNaNColumn, kNaN);
      x.RecomputeForward();
      return x.forward().SetV(0, nan.row, nan.head, kNaNColumn, v);
    }
  }
}

// Whether pair (h, i, j) of batch 0 takes part: row i sees key j and saw some key.
bool TakesPart(const BackwardProblem& x, std::int64_t h, std::int64_t i, std::int64_t j) {
  const AttentionParams& p = x.params().attention;
  return SeesThroughMask(p, 0, h, i, j) && x.forward().Lse(0, h, i) != -kInf;
}

// What one gradient row must be: the clean result, NaN in every column, or NaN in kNaNColumn only.
enum class Reach { kClean, kAllNaN, kColumnNaN };
struct GradientReach {
  std::vector<Reach> dq;      // [h·Nq + i]
  std::vector<Reach> dk, dv;  // [hk·Nk + j]
};

GradientReach ExpectedReach(const BackwardProblem& x, const BackwardNaN& nan) {
  const Shape& s = x.shape();
  const std::int64_t group = s.Hq / s.Hkv;
  GradientReach reach{std::vector<Reach>(s.Hq * s.Nq, Reach::kClean),
                      std::vector<Reach>(s.Hkv * s.Nk, Reach::kClean),
                      std::vector<Reach>(s.Hkv * s.Nk, Reach::kClean)};
  // Whether query row (h, i) holds the NaN (q_i, dO_i) or reads it through D_i = dO_i·O_i.
  auto row_holds_nan = [&](std::int64_t h, std::int64_t i) {
    if (nan.operand == Operand::kO) return h / group == nan.head && TakesPart(x, h, i, nan.row);
    return (nan.operand == Operand::kQ || nan.operand == Operand::kDO) && h == nan.head && i == nan.row;
  };
  const bool in_key = nan.operand == Operand::kK || nan.operand == Operand::kV;
  for (std::int64_t h = 0; h < s.Hq; ++h)
    for (std::int64_t i = 0; i < s.Nq; ++i) {
      const bool in_row = row_holds_nan(h, i);
      for (std::int64_t j = 0; j < s.Nk; ++j) {
        const std::int64_t hk = h / group;
        const bool poisoned = in_row || (in_key && hk == nan.head && j == nan.row);
        if (!poisoned || !TakesPart(x, h, i, j)) continue;
        reach.dq[h * s.Nq + i] = reach.dk[hk * s.Nk + j] = Reach::kAllNaN;  // dS_ij is NaN
        Reach& dv = reach.dv[hk * s.Nk + j];
        if (nan.operand == Operand::kQ || nan.operand == Operand::kK) dv = Reach::kAllNaN;  // P_ij is NaN
        if (nan.operand == Operand::kDO) dv = Reach::kColumnNaN;                           // P_ij·dO_i[c]
      }
    }
  return reach;
}

// Counts the gradient elements of x that break `reach` (against the clean run); one failure names the first.
void ExpectReach(const BackwardProblem& x, const BackwardProblem& clean, const GradientReach& reach) {
  const Shape& s = x.shape();
  std::int64_t wrong = 0;
  std::string first;
  auto check = [&](const char* what, float got, float clean_value, Reach r, std::int64_t h, std::int64_t row,
                   std::int64_t c) {
    const bool nan = r == Reach::kAllNaN || (r == Reach::kColumnNaN && c == kNaNColumn);
    if (nan ? std::isnan(got) : SameBits(got, clean_value)) return;
    if (wrong++ == 0) {
      first = std::string(what) + " (head " + std::to_string(h) + ", row " + std::to_string(row) +
              ", column " + std::to_string(c) + ") is " + std::to_string(got) + ", expected " +
              (nan ? std::string("NaN") : "the clean " + std::to_string(clean_value));
    }
  };
  for (std::int64_t h = 0; h < s.Hq; ++h)
    for (std::int64_t i = 0; i < s.Nq; ++i)
      for (std::int64_t c = 0; c < s.d; ++c)
        check("dQ", x.dQ(0, i, h, c), clean.dQ(0, i, h, c), reach.dq[h * s.Nq + i], h, i, c);
  for (std::int64_t hk = 0; hk < s.Hkv; ++hk)
    for (std::int64_t j = 0; j < s.Nk; ++j) {
      for (std::int64_t c = 0; c < s.d; ++c)
        check("dK", x.dK(0, j, hk, c), clean.dK(0, j, hk, c), reach.dk[hk * s.Nk + j], hk, j, c);
      for (std::int64_t c = 0; c < s.dv; ++c)
        check("dV", x.dV(0, j, hk, c), clean.dV(0, j, hk, c), reach.dv[hk * s.Nk + j], hk, j, c);
    }
  EXPECT_EQ(wrong, 0) << wrong << " wrong gradient elements, first " << first;
}

// Row i_nan = 20 of query head 1 (K/V head 0 of 2) and key j_nan = 29, Nq = 37 < Nk = 53: under the causal
// mask row 20 sees keys 0..36 and key 29 is seen by rows 13..36; under the window (8, 2) row 20 sees keys
// 28..38 and key 29 is seen by rows 11..21. Blocks of 8×16 put both inside partly masked tiles.
constexpr std::int64_t kNaNHead = 1, kNaNRow = 20, kNaNKvHead = 0, kNaNKey = 29;
const std::vector<BackwardNaN> kBackwardNaNs = {{"q", Operand::kQ, kNaNHead, kNaNRow},
                                                {"k", Operand::kK, kNaNKvHead, kNaNKey},
                                                {"v", Operand::kV, kNaNKvHead, kNaNKey},
                                                {"dO", Operand::kDO, kNaNHead, kNaNRow},
                                                {"O", Operand::kO, kNaNKvHead, kNaNKey}};

Shape BackwardNaNShape(DType dtype) {
  return {.Nq = 37, .Nk = 53, .Hq = 4, .Hkv = 2, .d = 24, .dv = 20, .dtype = dtype};
}

// Runs `nan` on clean and x (built alike, x not yet injected) with the fused kernel on every compiled target
// (default and 8×16 blocks) and with the standard reference; with the oracle too when `with_oracle` (it
// recomputes O and LSE from the inputs, so it shares the expected rows only for a NaN in q or dO).
void RunBackwardNaN(BackwardProblem& clean, BackwardProblem& x, const BackwardNaN& nan, bool with_oracle) {
  Inject(x, nan);
  const GradientReach reach = ExpectedReach(x, nan);
  // Not vacuous: the NaN reaches some dQ row, unless it sits in a query row that saw no key.
  const bool reaches_dq =
      std::any_of(reach.dq.begin(), reach.dq.end(), [](Reach r) { return r != Reach::kClean; });
  const bool in_row_without_keys = (nan.operand == Operand::kQ || nan.operand == Operand::kDO) &&
                                   x.forward().Lse(0, nan.head, nan.row) == -kInf;
  ASSERT_NE(reaches_dq, in_row_without_keys);
  auto run = [&](BackwardAlgorithm algorithm, const std::string& label) {
    SCOPED_TRACE(label);
    clean.ResetGradients(), x.ResetGradients();
    backward(clean.params(), algorithm);
    backward(x.params(), algorithm);
    ExpectReach(x, clean, reach);
  };
  for (std::int64_t target : TargetsUnderTest()) {
    simd::RestrictTargetForTest(target);
    for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{0, 0}, {8, 16}}) {
      for (BackwardProblem* p : {&clean, &x}) {
        p->params().attention.tiling.block_rows = rows;
        p->params().attention.tiling.block_cols = cols;
      }
      run(BackwardAlgorithm::kFused, "fused on " + simd::TargetName(target) + " blocks " +
                                         std::to_string(rows) + "x" + std::to_string(cols));
    }
  }
  simd::RestrictTargetForTest(0);
  run(BackwardAlgorithm::kStandard, "standard");
  if (with_oracle) run(BackwardAlgorithm::kOracle, "oracle");
}

void RunBackwardNaNs(DType dtype) {
  const std::vector<Modifiers> modifiers = {{.causal = true},
                                            {.causal = true, .softcap = 5.0f},
                                            {.window_left = 8, .window_right = 2},
                                            {.mask = MaskKind::kBool}};
  for (const Modifiers& mods : modifiers)
    for (const BackwardNaN& nan : kBackwardNaNs) {
      SCOPED_TRACE("NaN in " + nan.name + " " + mods.ToString() + " " + std::string(to_string(dtype)));
      BackwardProblem clean(BackwardNaNShape(dtype), mods, 7), x(BackwardNaNShape(dtype), mods, 7);
      RunBackwardNaN(clean, x, nan, nan.operand == Operand::kQ || nan.operand == Operand::kDO);
    }
}

// The pairs a row does not see used to form 0·NaN in every product: a NaN in q_i reached every dK row
// (dK_j += dS_ijᵀ q_i with dS_ij = 0), one in k_j every dQ row of its group, one in v_j or dO_i every dQ or
// dK row through dS_ij = 0·(dO_i·v_j − D_i), one in dO_i column c of every dV row (P_ij = 0 times dO_i); and
// under softcap 1 − tanh² of a NaN score made dS_ij NaN for hidden pairs as well.
TEST(NonFiniteBackward, Float32NaNReachesExactlyTheGradientsOfThePairsThatSeeIt) {
  RunBackwardNaNs(DType::kF32);
}

TEST(NonFiniteBackward, HalfPrecisionNaNReachesExactlyTheGradientsOfThePairsThatSeeIt) {
  RunBackwardNaNs(DType::kF16);
  RunBackwardNaNs(DType::kBF16);
}

// A row whose every visible score is −∞ (here through the additive mask) saw no key: LSE = −∞, O = 0, and it
// contributes nothing to any gradient even with a NaN in its q_i or dO_i (P_ij = 0 used to multiply them).
// The mask's other −∞ entries are arithmetic: those pairs take part, and a NaN in k_j or v_j reaches the rows
// of such pairs as IEEE arithmetic says.
TEST(NonFiniteBackward, ARowThatSawNoKeyContributesNothingEvenWithNaN) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (const BackwardNaN& nan : kBackwardNaNs) {
      SCOPED_TRACE("NaN in " + nan.name + " " + std::string(to_string(dtype)));
      const Shape shape = BackwardNaNShape(dtype);
      const Modifiers additive{.mask = MaskKind::kAdditive};
      BackwardProblem clean(shape, additive, 7), x(shape, additive, 7);
      // The mask (1, Hq, Nq, Nk) with row kNaNRow of head kNaNHead all −∞.
      const AttentionParams& p = clean.params().attention;
      const auto* bias = static_cast<const float*>(p.mask.data);
      std::vector<float> mask(bias, bias + shape.Hq * shape.Nq * shape.Nk);
      const std::int64_t empty_row = kNaNHead * p.mask.stride_head + kNaNRow * p.mask.stride_row;
      std::fill_n(mask.begin() + empty_row, shape.Nk, -kInf);
      for (BackwardProblem* problem : {&clean, &x}) {
        problem->forward().params().mask.data = mask.data();
        problem->RecomputeForward();
      }
      ASSERT_EQ(x.forward().Lse(0, kNaNHead, kNaNRow), -kInf);
      // The oracle recomputes the row's LSE from a NaN q_i as NaN.
      RunBackwardNaN(clean, x, nan, nan.operand == Operand::kDO);
    }
  }
}

}  // namespace
}  // namespace flashattn::testing
