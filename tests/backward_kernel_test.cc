// The fused backward kernel against the float64 oracle's gradients, with the tolerance relative to the
// standard backward of the same precision (flash-attn's convention): float32 error ≤ 2× the float32 standard
// backward's error + 1e-6, float16/bfloat16 ≤ 3× the same-precision standard backward's. Every mask and
// modifier, dropout, GQA, odd shapes, tiny tiles, every compiled SIMD target, rows that see no key, and
// bitwise determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backward_test_problem.h"
#include "simd/targets.h"
#include "test_targets.h"

namespace flashattn::testing {
namespace {

struct Case {
  Shape shape;
  Modifiers modifiers;
  Dropout dropout;
};

// Runs the standard and the fused backward on the same problem and checks the fused errors.
void ExpectFusedWithinStandard(BackwardProblem& x, const std::string& label, std::int64_t block_rows = 0,
                               std::int64_t block_cols = 0, int threads = 0) {
  x.ResetGradients();
  backward(x.params(), BackwardAlgorithm::kStandard);
  const GradientErrors standard = CompareGradientsWithOracle(x);
  x.ResetGradients();
  x.params().attention.tiling.block_rows = block_rows;
  x.params().attention.tiling.block_cols = block_cols;
  x.params().attention.num_threads = threads;
  backward(x.params(), BackwardAlgorithm::kFused);
  const GradientErrors fused = CompareGradientsWithOracle(x);
  const bool f32 = x.shape().dtype == DType::kF32;
  auto bound = [&](double standard_error) { return f32 ? 2 * standard_error + 1e-6 : 3 * standard_error; };
  EXPECT_LE(fused.dq, bound(standard.dq)) << label << " standard dq " << standard.dq;
  EXPECT_LE(fused.dk, bound(standard.dk)) << label << " standard dk " << standard.dk;
  EXPECT_LE(fused.dv, bound(standard.dv)) << label << " standard dv " << standard.dv;
}

void ExpectFusedWithinStandard(const Case& c, const std::string& label, std::int64_t block_rows = 0,
                               std::int64_t block_cols = 0, int threads = 0) {
  BackwardProblem x(c.shape, c.modifiers, c.shape.Nq * 131 + c.shape.Nk * 7 + c.shape.d, c.dropout);
  ExpectFusedWithinStandard(x, label, block_rows, block_cols, threads);
}

class FusedBackwardMatrixTest : public ::testing::TestWithParam<std::tuple<Shape, Modifiers>> {};

TEST_P(FusedBackwardMatrixTest, Float32WithinTwiceStandardPlus1e6) {
  const auto& [shape, modifiers] = GetParam();
  ExpectFusedWithinStandard({shape, modifiers, {}}, shape.ToString() + " " + modifiers.ToString());
}

INSTANTIATE_TEST_SUITE_P(Matrix, FusedBackwardMatrixTest,
                         ::testing::Combine(::testing::ValuesIn(BackwardShapeMatrix()),
                                            ::testing::ValuesIn(ModifierMatrix())),
                         [](const auto& info) {
                           return std::get<0>(info.param).ToString() + "_" +
                                  std::get<1>(info.param).ToString();
                         });

class FusedBackwardHalfTest : public ::testing::TestWithParam<std::tuple<DType, Modifiers>> {};

TEST_P(FusedBackwardHalfTest, WithinThreeTimesSamePrecisionStandard) {
  const auto& [dtype, modifiers] = GetParam();
  for (Shape shape :
       {Shape{.Nq = 97, .Nk = 113, .d = 59, .dv = 59},
        Shape{.batch = 2, .Nq = 113, .Nk = 97, .Hq = 4, .Hkv = 2, .d = 128, .dv = 40},
        Shape{.Nq = 300, .Nk = 300, .Hq = 2, .Hkv = 2, .d = 64, .dv = 64, .head_major = true}}) {
    shape.dtype = dtype;
    ExpectFusedWithinStandard({shape, modifiers, {}}, shape.ToString() + " " + modifiers.ToString());
  }
}

INSTANTIATE_TEST_SUITE_P(Matrix, FusedBackwardHalfTest,
                         ::testing::Combine(::testing::Values(DType::kF16, DType::kBF16),
                                            ::testing::ValuesIn(ModifierMatrix())),
                         [](const auto& info) {
                           return std::string(to_string(std::get<0>(info.param))) + "_" +
                                  std::get<1>(info.param).ToString();
                         });

TEST(FusedBackwardTest, DropoutWithEveryModifierWithinTwiceStandard) {
  for (const Modifiers& m : ModifierMatrix()) {
    ExpectFusedWithinStandard({{.batch = 2, .Nq = 97, .Nk = 113, .Hq = 4, .Hkv = 2, .d = 40, .dv = 40},
                               m,
                               {.p = 0.2f, .seed = 17, .offset = 5}},
                              "dropout " + m.ToString());
  }
}

TEST(FusedBackwardTest, HalfPrecisionDropoutWithinThreeTimesSamePrecisionStandard) {
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    for (const Modifiers& m : {Modifiers{}, Modifiers{.causal = true, .softcap = 3.0f, .alibi = true}}) {
      Shape shape{.batch = 2, .Nq = 97, .Nk = 113, .Hq = 4, .Hkv = 2, .d = 40, .dv = 59};
      shape.dtype = dtype;
      ExpectFusedWithinStandard({shape, m, {.p = 0.3f, .seed = 23, .offset = 9}},
                                std::string(to_string(dtype)) + " dropout " + m.ToString());
    }
  }
}

// Block sizes that are not multiples of anything: many ragged tiles on both axes, band edges inside tiles.
TEST(FusedBackwardTest, TinyAndRaggedTilesWithinTwiceStandard) {
  for (auto [Br, Bc] :
       std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 1}, {3, 5}, {7, 16}, {64, 9}, {200, 200}}) {
    for (const Modifiers& m :
         {Modifiers{.causal = true}, Modifiers{.window_left = 5, .window_right = 11, .alibi = true}}) {
      ExpectFusedWithinStandard({{.Nq = 61, .Nk = 75, .Hq = 2, .Hkv = 1, .d = 24, .dv = 17}, m, {}},
                                "Br=" + std::to_string(Br) + " Bc=" + std::to_string(Bc) + " " + m.ToString(),
                                Br, Bc);
    }
  }
}

TEST(FusedBackwardTest, AnyThreadCountWithinTwiceStandard) {
  for (int threads : {1, 2, 3, 7}) {
    ExpectFusedWithinStandard(
        {{.batch = 2, .Nq = 130, .Nk = 190, .Hq = 2, .Hkv = 1, .d = 32, .dv = 32}, {.causal = true}, {}},
        "threads=" + std::to_string(threads), 0, 0, threads);
  }
}

// Highway's test-all-targets idea: the same checks on every target compiled in that this CPU runs.
TEST(FusedBackwardTest, EveryCompiledTargetWithinTolerance) {
  const std::vector<std::int64_t> targets = TargetsUnderTest();
  ASSERT_FALSE(targets.empty());
  for (std::int64_t target : targets) {
    simd::RestrictTargetForTest(target);
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      ExpectFusedWithinStandard(
          {{.batch = 1, .Nq = 97, .Nk = 113, .Hq = 2, .Hkv = 1, .d = 59, .dv = 40, .dtype = dtype},
           {.causal = true, .softcap = 4.0f, .alibi = true, .mask = MaskKind::kBool},
           {.p = 0.1f, .seed = 3}},
          simd::TargetName(target) + " " + std::string(to_string(dtype)));
    }
  }
  simd::RestrictTargetForTest(0);
}

// Rows that see no key (LSE = −inf) contribute zero gradients, never NaN: dQ of such a row is exactly 0,
// and a K/V head that no row sees gets dK = dV = 0. Two causes: the boolean mask tensor (rows all false, and
// every row of one head) and a window that leaves the first rows of a Nq > Nk problem with no key. The fused
// backward runs on every compiled target, in every element type, after the rows are checked to have
// LSE = −inf (so the test cannot pass vacuously), and is also held to the usual bound against the oracle.
void ExpectRowsWithoutKeysGiveZeroGradients(BackwardProblem& x, const std::vector<std::int64_t>& empty_rows,
                                            std::int64_t empty_head, const std::string& label) {
  const Shape& s = x.shape();
  for (std::int64_t h = 0; h < s.Hq; ++h)
    for (std::int64_t i = 0; i < s.Nq; ++i) {
      const bool empty = h == empty_head || std::count(empty_rows.begin(), empty_rows.end(), i) > 0;
      ASSERT_EQ(std::isinf(x.forward().Lse(0, h, i)), empty) << label << " head " << h << " row " << i;
    }
  ExpectFusedWithinStandard(x, label);  // leaves the fused gradients in x
  const std::int64_t group = s.Hq / s.Hkv;
  for (std::int64_t h = 0; h < s.Hq; ++h)
    for (std::int64_t i = 0; i < s.Nq; ++i) {
      const bool empty = h == empty_head || std::count(empty_rows.begin(), empty_rows.end(), i) > 0;
      for (std::int64_t c = 0; c < s.d; ++c) {
        const float g = x.dQ(0, i, h, c);
        ASSERT_TRUE(std::isfinite(g)) << label << " dQ head " << h << " row " << i;
        if (empty) ASSERT_EQ(g, 0.0f) << label << " dQ head " << h << " row " << i;
      }
    }
  for (std::int64_t hkv = 0; hkv < s.Hkv; ++hkv) {
    const bool unseen = group == 1 && hkv == empty_head;
    for (std::int64_t j = 0; j < s.Nk; ++j) {
      for (std::int64_t c = 0; c < s.d; ++c) {
        ASSERT_TRUE(std::isfinite(x.dK(0, j, hkv, c))) << label << " dK head " << hkv << " key " << j;
        if (unseen) ASSERT_EQ(x.dK(0, j, hkv, c), 0.0f) << label << " dK head " << hkv << " key " << j;
      }
      for (std::int64_t c = 0; c < s.dv; ++c) {
        ASSERT_TRUE(std::isfinite(x.dV(0, j, hkv, c))) << label << " dV head " << hkv << " key " << j;
        if (unseen) ASSERT_EQ(x.dV(0, j, hkv, c), 0.0f) << label << " dV head " << hkv << " key " << j;
      }
    }
  }
}

TEST(FusedBackwardTest, RowsWithoutVisibleKeysGiveZeroGradientsOnEveryTarget) {
  const std::vector<std::int64_t> targets = TargetsUnderTest();
  ASSERT_FALSE(targets.empty());
  for (std::int64_t target : targets) {
    simd::RestrictTargetForTest(target);
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      const std::string name = simd::TargetName(target) + " " + std::string(to_string(dtype));
      {
        // The mask tensor (1, Hq, Nq, Nk), broadcast over the batch: random keeps, then rows 0, 1, 40 and
        // 96 all false in head 0 (the first and last rows of Q blocks of every size), and all of head 1.
        const Shape shape{.Nq = 97, .Nk = 113, .Hq = 2, .Hkv = 2, .d = 40, .dv = 24, .dtype = dtype};
        BackwardProblem x(shape, {.mask = MaskKind::kBool}, 31, {.p = 0.1f, .seed = 8});
        const std::vector<std::int64_t> empty_rows = {0, 1, 40, 96};
        std::vector<std::uint8_t> keep(static_cast<std::size_t>(2 * 97 * 113));
        std::mt19937 rng(5);
        for (std::size_t n = 0; n < keep.size(); ++n) keep[n] = n < 97 * 113 && rng() % 5 != 0;
        for (std::int64_t i : empty_rows) std::fill_n(keep.begin() + i * 113, 113, std::uint8_t{0});
        x.forward().params().mask.data = keep.data();
        x.RecomputeForward();
        ExpectRowsWithoutKeysGiveZeroGradients(x, empty_rows, 1, name + " bool mask");
      }
      {
        // Nq > Nk with a window: query i sees keys i − 16 − 2 ≤ j ≤ i − 16 + 3, so rows 0..12 see none;
        // with causal too (j ≤ i − 16), rows 0..15.
        const Shape shape{.Nq = 113, .Nk = 97, .Hq = 2, .Hkv = 1, .d = 59, .dv = 40, .dtype = dtype};
        for (bool causal : {false, true}) {
          std::vector<std::int64_t> empty_rows(causal ? 16 : 13);
          std::iota(empty_rows.begin(), empty_rows.end(), 0);
          BackwardProblem x(shape, {.causal = causal, .window_left = 2, .window_right = 3, .alibi = true}, 32,
                            {.p = 0.1f, .seed = 9});
          ExpectRowsWithoutKeysGiveZeroGradients(x, empty_rows, -1,
                                                 name + (causal ? " causal" : "") + " window (2, 3)");
        }
      }
    }
  }
  simd::RestrictTargetForTest(0);
}

TEST(FusedBackwardTest, TwentyRepeatedCallsAreBitwiseIdentical) {
  for (int threads : {2, 3}) {
    BackwardProblem x({.batch = 2, .Nq = 300, .Nk = 257, .Hq = 4, .Hkv = 2, .d = 64, .dv = 48},
                      {.causal = true, .alibi = true}, 9, {.p = 0.1f, .seed = 5});
    x.params().attention.num_threads = threads;
    backward(x.params());
    const std::vector<std::uint16_t> first = x.GradientBits();
    for (int call = 1; call < 20; ++call) {
      x.ResetGradients();
      backward(x.params());
      ASSERT_EQ(x.GradientBits(), first) << "call " << call << " threads " << threads;
    }
  }
}

}  // namespace
}  // namespace flashattn::testing
