// The reference attention algorithms against the float64 oracle: every algorithm, the shape matrix of odd
// head dims and lengths, every mask and modifier of docs/algorithms.md §6.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "reference/reference.h"
#include "test_problem.h"

namespace flashattn::testing {
namespace {

constexpr double kTolerance = 1e-5;

using Case = std::tuple<Algorithm, Shape, Modifiers>;

class ReferenceAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(ReferenceAttentionTest, MatchesFloat64OracleWithin1e5) {
  const auto& [algorithm, shape, modifiers] = GetParam();
  Problem problem(shape, modifiers, /*seed=*/shape.Nq * 7919 + shape.Nk * 31 + shape.d);
  forward(problem.params(), algorithm);
  const Errors errors = CompareWithOracle(problem);
  EXPECT_LE(errors.o_error, kTolerance);
  EXPECT_LE(errors.lse_error, kTolerance);
}

INSTANTIATE_TEST_SUITE_P(
    Matrix, ReferenceAttentionTest,
    ::testing::Combine(::testing::Values(Algorithm::kStandard, Algorithm::kFlash1, Algorithm::kFlash2),
                       ::testing::ValuesIn(ForwardShapeMatrix()), ::testing::ValuesIn(ModifierMatrix())),
    [](const ::testing::TestParamInfo<Case>& info) {
      return std::string(to_string(std::get<0>(info.param))) + "_" + std::get<1>(info.param).ToString() + "_" +
             std::get<2>(info.param).ToString();
    });

// Tiny fast memories force many blocks with ragged last blocks on both axes.
TEST(ReferenceAttentionTest, TiledAlgorithmsMatchOracleForEveryBlockSize) {
  for (std::int64_t M_bytes : {16 * 40, 16 * 40 * 3, 4096, 100000}) {
    for (Algorithm algorithm : {Algorithm::kFlash1, Algorithm::kFlash2}) {
      Problem problem({.batch = 1, .Nq = 97, .Nk = 113, .Hq = 2, .Hkv = 1, .d = 40, .dv = 40},
                      {.causal = true, .alibi = true}, 7);
      problem.params().tiling.fast_memory_bytes = M_bytes;
      forward(problem.params(), algorithm);
      const Errors errors = CompareWithOracle(problem);
      EXPECT_LE(errors.o_error, kTolerance) << to_string(algorithm) << " M=" << M_bytes;
      EXPECT_LE(errors.lse_error, kTolerance) << to_string(algorithm) << " M=" << M_bytes;
    }
  }
}

TEST(ReferenceAttentionTest, SeedsBlockRuleGivesBcCeilMOver4dAndBrMinBcD) {
  AttentionParams params;
  params.head_dim = 64;
  params.tiling.fast_memory_bytes = 4 * 1000;  // M = 1000 floats: Bc = ⌈1000/256⌉ = 4, Br = min(4, 64)
  EXPECT_EQ(reference::ChooseBlockSizes(params).Bc, 4);
  EXPECT_EQ(reference::ChooseBlockSizes(params).Br, 4);
  params.tiling.fast_memory_bytes = 4 * 65536;  // Bc = 256, Br = min(256, 64) = 64
  EXPECT_EQ(reference::ChooseBlockSizes(params).Bc, 256);
  EXPECT_EQ(reference::ChooseBlockSizes(params).Br, 64);
}

// Causal with Nq > Nk: the first Nq − Nk rows see no key. They must be exactly zero with LSE −∞.
TEST(ReferenceAttentionTest, RowsWithoutVisibleKeyGiveZerosAndNegativeInfinityLse) {
  for (Algorithm algorithm : {Algorithm::kStandard, Algorithm::kFlash1, Algorithm::kFlash2, Algorithm::kOracle}) {
    Problem problem({.Nq = 20, .Nk = 5, .d = 8, .dv = 8}, {.causal = true}, 3);
    forward(problem.params(), algorithm);
    for (std::int64_t i = 0; i < 15; ++i) {
      EXPECT_EQ(problem.Lse(0, 0, i), -std::numeric_limits<float>::infinity()) << to_string(algorithm) << " row " << i;
      for (std::int64_t c = 0; c < 8; ++c) EXPECT_EQ(problem.O(0, i, 0, c), 0.0f) << to_string(algorithm);
    }
    for (std::int64_t i = 15; i < 20; ++i) EXPECT_TRUE(std::isfinite(problem.Lse(0, 0, i))) << to_string(algorithm);
    EXPECT_LE(CompareWithOracle(problem).o_error, kTolerance);
  }
}

TEST(ReferenceAttentionTest, ZeroLengthKeysGiveZeroOutputAndNegativeInfinityLse) {
  for (Algorithm algorithm : {Algorithm::kStandard, Algorithm::kFlash1, Algorithm::kFlash2, Algorithm::kOracle}) {
    Problem problem({.Nq = 3, .Nk = 0, .d = 8, .dv = 8}, {}, 3);
    forward(problem.params(), algorithm);
    for (std::int64_t i = 0; i < 3; ++i) {
      EXPECT_EQ(problem.Lse(0, 0, i), -std::numeric_limits<float>::infinity());
      for (std::int64_t c = 0; c < 8; ++c) EXPECT_EQ(problem.O(0, i, 0, c), 0.0f);
    }
  }
}

TEST(ReferenceAttentionTest, ZeroLengthQueriesWriteNothingAndSucceed) {
  for (Algorithm algorithm : {Algorithm::kStandard, Algorithm::kFlash1, Algorithm::kFlash2, Algorithm::kOracle}) {
    Problem problem({.Nq = 0, .Nk = 9, .d = 8, .dv = 8}, {}, 3);
    EXPECT_NO_THROW(forward(problem.params(), algorithm));
  }
}

// The oracle is itself checked against a hand-computed case: two keys, one query, d = 1.
TEST(ReferenceAttentionTest, OracleMatchesHandComputedSoftmax) {
  Problem problem({.Nq = 1, .Nk = 2, .d = 1, .dv = 1}, {}, 1);
  problem.params().scale = 1.0f;
  problem.SetQ(0, 0, 0, 0, 1.0f);
  problem.SetK(0, 0, 0, 0, 0.0f);
  problem.SetK(0, 1, 0, 0, std::log(3.0f));  // scores 0 and ln 3: P = (1/4, 3/4)
  problem.SetV(0, 0, 0, 0, 10.0f);
  problem.SetV(0, 1, 0, 0, 2.0f);
  const reference::OracleRows rows = reference::OracleHeadRows(problem.params(), 0, 0, 0, 1);
  EXPECT_NEAR(rows.o[0], 10.0 / 4 + 2.0 * 3 / 4, 1e-6);
  EXPECT_NEAR(rows.lse[0], std::log(4.0), 1e-6);
}

// In float16 the standard algorithm keeps S and P in float16; its error is what the kernels are allowed
// twice of. It must be larger than float32's, and still small.
TEST(ReferenceAttentionTest, ReducedPrecisionStandardHasReducedPrecisionError) {
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    Problem problem({.Nq = 97, .Nk = 113, .Hq = 2, .Hkv = 1, .d = 64, .dv = 64, .dtype = dtype}, {.causal = true}, 5);
    forward(problem.params(), Algorithm::kStandard);
    const double error = CompareWithOracle(problem).o_error;
    EXPECT_GT(error, 1e-5) << to_string(dtype);
    EXPECT_LT(error, dtype == DType::kF16 ? 5e-3 : 4e-2) << to_string(dtype);
  }
}

// A window reach near INT64_MAX sees every key, like −1; i + Nk − Nq ± reach must not overflow.
// Every algorithm, the fused kernel included, takes its reaches from common/score.h (Band).
TEST(ReferenceAttentionTest, HugeWindowReachesEqualUnboundedWindowInEveryAlgorithm) {
  const std::pair<std::int64_t, std::int64_t> windows[] = {{-1, INT64_MAX}, {INT64_MAX, -1}, {INT64_MAX, INT64_MAX}};
  for (Algorithm algorithm : kAllAlgorithms) {
    for (auto [left, right] : windows) {
      const Shape shape{.Nq = 5, .Nk = 3, .d = 8, .dv = 8};  // i + Nk − Nq runs from −2 to 2
      Problem windowed(shape, {.window_left = left, .window_right = right}, 11);
      Problem unbounded(shape, {}, 11);
      forward(windowed.params(), algorithm);
      forward(unbounded.params(), algorithm);
      for (std::int64_t i = 0; i < shape.Nq; ++i) {
        EXPECT_EQ(windowed.Lse(0, 0, i), unbounded.Lse(0, 0, i)) << to_string(algorithm) << " row " << i;
        for (std::int64_t c = 0; c < shape.dv; ++c)
          EXPECT_EQ(windowed.O(0, i, 0, c), unbounded.O(0, i, 0, c)) << to_string(algorithm) << " row " << i;
      }
    }
  }
}

// Block sizes and fast memories far beyond the problem give the problem's own single block, not a
// gigantic allocation.
TEST(ReferenceAttentionTest, HugeTilingHintsComputeTheSameAttentionInEveryAlgorithm) {
  const Tiling tilings[] = {{.block_rows = std::int64_t{1} << 40, .block_cols = std::int64_t{1} << 40},
                            {.fast_memory_bytes = std::int64_t{1} << 50}};
  for (Algorithm algorithm : kAllAlgorithms) {
    for (const Tiling& tiling : tilings) {
      Problem problem({.Nq = 97, .Nk = 113, .d = 40, .dv = 40}, {.causal = true}, 5);
      problem.params().tiling = tiling;
      ASSERT_NO_THROW(forward(problem.params(), algorithm)) << to_string(algorithm);
      EXPECT_LE(CompareWithOracle(problem).o_error, kTolerance) << to_string(algorithm);
    }
  }
}

}  // namespace
}  // namespace flashattn::testing
