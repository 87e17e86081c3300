// Non-finite data is not an error (issue 8): NaN or ±inf in Q, K or V flows into exactly the outputs that
// IEEE arithmetic sends it to, and nowhere else. For row i of head h and its visible keys V(i):
//   S_ij = s·q_i·k_j,  m_i = max_j S_ij,  P_ij = exp(S_ij − m_i),  l_i = Σ_j P_ij,  O_i = Σ_j P_ij v_j / l_i
// - NaN in q_i: every S_ij is NaN, so O_i and LSE_i are NaN (if V(i) is not empty); other rows are untouched.
// - NaN in k_j: S_ij is NaN for every row that sees j, whose O and LSE become NaN; a row that cannot see j
//   (causal, window) never forms S_ij and is bitwise the result without the NaN.
// - NaN (or +inf) in v_j[c]: only column c of the rows that see j becomes NaN (+inf, since every P_ij > 0
//   here); LSE does not depend on V and every other column is untouched.
// - +inf in k_j[c]: S_ij = ±inf with the sign of q_i[c]. +inf makes m_i = +inf and P_ij = exp(inf − inf) =
//   NaN: the row is NaN. −inf gives P_ij = 0: the row is attention without key j (the float64 oracle agrees).
// - Every visible score −inf: the row is treated like a row without keys (SPEC §5): O = 0, LSE = −∞.
// - softcap c·tanh(S/c) maps ±inf scores to ±c: every row is finite and agrees with the oracle.
// Checked for the fused kernel on every compiled SIMD target (default tiles and small forced ones, so that
// the key lies inside a partly masked tile) and for decode(); memory a call does not read (cache slots
// beyond cache_seqlens) may hold NaN without effect. backward(): a NaN in q_i reaches dQ_i and the dV rows
// of the keys row i sees (its test below says why).
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
#include "kernels/fused_forward.h"
#include "test_problem.h"

namespace flashattn::testing {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

// Query row i sees key j (SPEC §5, bottom-right aligned).
bool Sees(const AttentionParams& p, std::int64_t i, std::int64_t j) {
  const std::int64_t diagonal = i + p.seqlen_k - p.seqlen_q;
  if (p.causal && j > diagonal) return false;
  if (p.window_left >= 0 && j < diagonal - p.window_left) return false;
  if (p.window_right >= 0 && j > diagonal + p.window_right) return false;
  return true;
}
bool SeesAnyKey(const AttentionParams& p, std::int64_t i) {
  for (std::int64_t j = 0; j < p.seqlen_k; ++j)
    if (Sees(p, i, j)) return true;
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
    return b == kB && group(p, h) == kHk && Sees(p, i, kJ);
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
         return SeesAnyKey(p, i) ? Expect::kAllNaN : Expect::kClean;
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

// Runs the injection on every fused target; one failure per target names the wrong rows' count and the first.
void RunFusedCase(const Shape& shape, const Modifiers& mods, std::int64_t block_rows, std::int64_t block_cols,
                  const Injection& injection) {
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
  for (std::int64_t target : kernels::FusedTargets()) {
    kernels::RestrictFusedTargetForTest(target);
    clean.ResetOutputs();
    x.ResetOutputs();
    forward(clean.params(), Algorithm::kFused);
    forward(x.params(), Algorithm::kFused);
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
    EXPECT_EQ(wrong_rows, 0) << kernels::FusedTargetName(target) << ": " << wrong_rows
                             << " wrong rows, first " << first;
  }
  kernels::RestrictFusedTargetForTest(0);
}

// Runs the named injections under the given modifiers, default and small tiles, on every fused target.
void RunInjections(DType dtype, const std::vector<std::string>& names,
                   const std::vector<Modifiers>& modifiers) {
  // Row kI = 30 of 37 sees keys ≤ 30 + 53 − 37 = 46 under the causal mask, so key kJ = 29 is visible to rows
  // 13..36 only; the window (8, 2) shows it to rows 11..21 only, and row kI = 30 sees keys 38..48 (not kJ).
  const Shape shape{.batch = 2, .Nq = 37, .Nk = 53, .Hq = 4, .Hkv = 2, .d = 24, .dv = 20, .dtype = dtype};
  for (const Injection& injection : Injections()) {
    if (std::find(names.begin(), names.end(), injection.name) == names.end()) continue;
    for (const Modifiers& mods : modifiers) {
      for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{0, 0}, {8, 16}}) {
        SCOPED_TRACE(injection.name + " " + mods.ToString() + " tiles " + std::to_string(rows) + "x" +
                     std::to_string(cols));
        RunFusedCase(shape, mods, rows, cols, injection);
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
                  {{.causal = true}, {.window_left = 8, .window_right = 2}});
  }
}

// On targets without F16C (SSE4, SSSE3, SCALAR) Highway's emulated float16 widening turned inf and NaN into
// finite values of 65536..131008; LoadF32 now corrects the exponent-31 lanes there.
TEST(NonFiniteFused, Float16KAndVInjectionsOnEveryTarget) {
  RunInjections(DType::kF16, {"nan_in_k", "plus_inf_in_k"}, kAllModifiers);
  RunInjections(DType::kF16, {"nan_in_v", "plus_inf_in_v"}, kUnmasked);
}

// ---- decode
// ---------------------------------------------------------------------------------------------------

void StoreCache(void* cache, const DecodeCase& c, std::int64_t b, std::int64_t j, std::int64_t hk,
                std::int64_t e, float value) {
  StoreFromFloat(static_cast<std::uint16_t*>(cache), c.shape().dtype, c.CacheOffset(b, j, hk) + e, value);
}

// Three queries at positions cached − 3 + i (causal): a NaN in key or value cached − 2 reaches queries 1 and
// 2 of that sequence and K/V head only; query 0 and every other sequence and head are bitwise the clean
// result. (A NaN key used to be swallowed by the merge of the split partials, std::max dropping a NaN LSE;
// a NaN value reached query 0, which cannot see it, as 0·NaN in P·V.)
// On every compiled target, float32 and float16 caches (emulated float16 widening must keep the NaN): R = 6
// rows take the kernel's direct path where one register tile holds them (AVX-512), the widened one elsewhere.
TEST(NonFiniteDecode, NaNInTheCacheReachesOnlyTheQueriesThatSeeIt) {
  for (const std::int64_t target : kernels::FusedTargets()) {
    for (const auto [page_size, dtype] : {std::pair<std::int64_t, DType>{0, DType::kF32}, {4, DType::kF32},
                                          {0, DType::kF16}, {4, DType::kF16}}) {
      for (bool in_v : {false, true}) {
        kernels::RestrictFusedTargetForTest(target);
        SCOPED_TRACE(std::string(in_v ? "v_cache" : "k_cache") + (page_size ? " paged" : " contiguous") +
                     (dtype == DType::kF16 ? " f16" : " f32") + " on " + kernels::FusedTargetName(target));
        const DecodeShape shape{.Nq = 3, .Hq = 4, .Hkv = 2, .d = 16, .Nmax = 40, .cached = {37, 21},
                                .dtype = dtype, .page_size = page_size};
        DecodeCase clean(shape, DecodeMods{.causal = true}, 3), x(shape, DecodeMods{.causal = true}, 3);
        const std::int64_t b0 = 1, j0 = 21 - 2, hk0 = 0, e0 = 7;
        StoreCache(in_v ? x.params().v_cache : x.params().k_cache, x, b0, j0, hk0, e0, kNaN);
        for (std::int64_t splits : {1, 3}) {
          clean.params().num_splits = x.params().num_splits = splits;
          decode(clean.params());
          decode(x.params());
          // Wrong elements: a NaN expected but not found, a clean value expected but changed.
          std::int64_t missing_nan = 0, changed = 0;
          std::string first_missing, first_changed;
          auto note = [](std::int64_t& count, std::string& first, const std::string& where) {
            if (count++ == 0) first = where;
          };
          for (std::int64_t b = 0; b < 2; ++b)
            for (std::int64_t i = 0; i < 3; ++i)
              for (std::int64_t h = 0; h < 4; ++h) {
                const bool sees = b == b0 && h / 2 == hk0 && i >= 1;
                const std::string row = "(b, i, h) = (" + std::to_string(b) + ", " + std::to_string(i) +
                                        ", " + std::to_string(h) + ")";
                for (std::int64_t e = 0; e < 16; ++e) {
                  const float o = x.O(b, i, h, e);
                  const std::string where = "O" + row + "[" + std::to_string(e) + "] = " + std::to_string(o);
                  if (sees && (!in_v || e == e0)) {
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
          EXPECT_EQ(missing_nan, 0) << "num_splits " << splits << ": NaN expected, first " << first_missing;
          EXPECT_EQ(changed, 0) << "num_splits " << splits << ": clean result expected, first "
                                << first_changed;
        }
      }
    }
  }
  kernels::RestrictFusedTargetForTest(0);
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

// backward() needs finite O and LSE, so the NaN goes into q_i after the forward pass; the backward pass then
// recomputes S_ij = NaN for the keys j row i sees, and P_ij = e^{S_ij − LSE_i} = NaN. Row i of dQ
// (s·Σ_j dS_ij k_j) is NaN, and so is dV_j (Σ_i P_ij dO_i) for every key j that row i sees; every other dQ
// and dV row is bitwise the clean result. For every algorithm but the oracle (which recomputes LSE from the
// NaN) on every compiled SIMD target, causal, with and without softcap (on Highway's emulated targets
// softcap's Tanh met the NaN undefined before score_mods-inl.h's SoftcapTanh). dK is not checked: the
// product dSᵀQ also forms 0·q_i for the keys row i cannot see (reported to the lead).
TEST(NonFiniteBackward, NaNInQReachesItsDqRowAndTheDvRowsOfTheKeysItSees) {
  const Shape shape{.Nq = 37, .Nk = 45, .Hq = 2, .Hkv = 1, .d = 16, .dv = 16};
  const std::int64_t i_nan = 20, h_nan = 1;
  for (float softcap : {0.0f, 5.0f}) {
    const Modifiers modifiers{.causal = true, .softcap = softcap};
    BackwardProblem clean(shape, modifiers, 7), x(shape, modifiers, 7);
    x.forward().SetQ(0, i_nan, h_nan, 3, kNaN);
    const AttentionParams& p = x.params().attention;
    for (std::int64_t target : kernels::FusedTargets()) {
      kernels::RestrictFusedTargetForTest(target);
      for (BackwardAlgorithm algorithm : {BackwardAlgorithm::kFused, BackwardAlgorithm::kStandard}) {
        SCOPED_TRACE(kernels::FusedTargetName(target) + (softcap > 0 ? " softcap " : " ") +
                     (algorithm == BackwardAlgorithm::kFused ? "fused" : "standard"));
        clean.ResetGradients(), x.ResetGradients();
        backward(clean.params(), algorithm);
        backward(x.params(), algorithm);
        for (std::int64_t i = 0; i < shape.Nq; ++i)
          for (std::int64_t h = 0; h < shape.Hq; ++h)
            for (std::int64_t c = 0; c < shape.d; ++c) {
              if (i == i_nan && h == h_nan) {
                EXPECT_TRUE(std::isnan(x.dQ(0, i, h, c))) << "dQ " << i << " " << h << " " << c;
              } else {
                EXPECT_TRUE(SameBits(x.dQ(0, i, h, c), clean.dQ(0, i, h, c))) << "dQ " << i << " " << h;
              }
            }
        for (std::int64_t j = 0; j < shape.Nk; ++j)
          for (std::int64_t c = 0; c < shape.dv; ++c) {
            if (Sees(p, i_nan, j)) {
              EXPECT_TRUE(std::isnan(x.dV(0, j, 0, c))) << "dV " << j << " " << c;
            } else {
              EXPECT_TRUE(SameBits(x.dV(0, j, 0, c), clean.dV(0, j, 0, c))) << "dV " << j << " " << c;
            }
          }
      }
    }
    kernels::RestrictFusedTargetForTest(0);
  }
}

}  // namespace
}  // namespace flashattn::testing
