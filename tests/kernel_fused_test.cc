// The fused kernel against the float64 oracle on every SIMD target this CPU runs: its error must be at
// most twice the error of the plain `standard` algorithm in the same precision on the same inputs (plus
// 1e-6 in float32), over the foundation's shape matrix, d = 512, d ≠ dv, both layouts, every mask and
// modifier, and block sizes forced to odd values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "common/cpu_caches.h"
#include "forward/forward.h"
#include "simd/targets.h"
#include "test_problem.h"
#include "test_targets.h"

namespace flashattn::testing {
namespace {

// The forward matrix (test_problem.h) plus the largest head dims, d ≠ dv both ways, and the head-major
// layout with GQA.
std::vector<Shape> ShapeMatrix() {
  std::vector<Shape> shapes = ForwardShapeMatrix();
  shapes.push_back({.batch = 1, .Nq = 97, .Nk = 113, .Hq = 1, .Hkv = 1, .d = 512, .dv = 512});
  shapes.push_back({.batch = 1, .Nq = 40, .Nk = 77, .Hq = 2, .Hkv = 1, .d = 64, .dv = 512});
  shapes.push_back(
      {.batch = 1, .Nq = 77, .Nk = 40, .Hq = 2, .Hkv = 2, .d = 512, .dv = 7, .head_major = true});
  shapes.push_back(
      {.batch = 2, .Nq = 97, .Nk = 200, .Hq = 4, .Hkv = 1, .d = 59, .dv = 59, .head_major = true});
  return shapes;
}

// Runs the fused kernel on `problem` once per SIMD target and checks each against `standard`'s error.
void ExpectFusedWithinTwiceStandard(Problem& problem, const std::string& label) {
  forward(problem.params(), Algorithm::kStandard);
  const Errors standard = CompareWithOracle(problem);
  const double slack = problem.shape().dtype == DType::kF32 ? 1e-6 : 0.0;
  const std::vector<std::int64_t> targets = TargetsUnderTest();
  ASSERT_FALSE(targets.empty());
  for (std::int64_t target : targets) {
    simd::RestrictTargetForTest(target);
    ASSERT_EQ(simd::DispatchedTarget(), target);
    problem.ResetOutputs();
    forward(problem.params(), Algorithm::kFused);
    const Errors fused = CompareWithOracle(problem);
    EXPECT_LE(fused.o_error, 2 * standard.o_error + slack)
        << label << " on " << simd::TargetName(target) << " (standard: " << standard.o_error << ")";
    EXPECT_LE(fused.lse_error, 2 * standard.lse_error + 1e-6)
        << label << " on " << simd::TargetName(target) << " (standard: " << standard.lse_error << ")";
  }
  simd::RestrictTargetForTest(0);
}

using Case = std::tuple<DType, Shape, Modifiers>;

class FusedKernelTest : public ::testing::TestWithParam<Case> {};

TEST_P(FusedKernelTest, ErrorAtMostTwiceSamePrecisionStandardOnEveryTarget) {
  auto [dtype, shape, modifiers] = GetParam();
  shape.dtype = dtype;
  Problem problem(shape, modifiers, /*seed=*/shape.Nq * 7919 + shape.Nk * 31 + shape.d);
  ExpectFusedWithinTwiceStandard(problem, shape.ToString() + "_" + modifiers.ToString());
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  Shape shape = std::get<1>(info.param);
  shape.dtype = std::get<0>(info.param);
  return shape.ToString() + "_" + std::get<2>(info.param).ToString();
}

INSTANTIATE_TEST_SUITE_P(F32, FusedKernelTest,
                         ::testing::Combine(::testing::Values(DType::kF32), ::testing::ValuesIn(ShapeMatrix()),
                                            ::testing::ValuesIn(ModifierMatrix())),
                         CaseName);

// float16/bfloat16: the same shapes and every mask and modifier, against `standard` in the same precision.
INSTANTIATE_TEST_SUITE_P(ReducedPrecision, FusedKernelTest,
                         ::testing::Combine(::testing::Values(DType::kF16, DType::kBF16),
                                            ::testing::ValuesIn(ShapeMatrix()),
                                            ::testing::ValuesIn(ModifierMatrix())),
                         CaseName);

// Block sizes below, at and above the micro-kernel's 6 rows × 2 vectors, including ones that split the
// packed panels and the causal diagonal unevenly (the IO helper sweeps these through params.tiling).
TEST(FusedKernelTest, EveryForcedBlockSizeMatchesOracle) {
  for (auto [Br, Bc] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {1, 1}, {1, 7}, {5, 3}, {6, 16}, {7, 17}, {13, 40}, {64, 33}, {200, 300}}) {
    Problem problem({.batch = 1, .Nq = 97, .Nk = 113, .Hq = 2, .Hkv = 1, .d = 40, .dv = 33},
                    {.causal = true, .window_left = 50, .alibi = true}, 11);
    problem.params().tiling.block_rows = Br;
    problem.params().tiling.block_cols = Bc;
    ASSERT_EQ(forward_kernel::ChooseFusedTiling(problem.params()).Br, Br);
    ASSERT_EQ(forward_kernel::ChooseFusedTiling(problem.params()).Bc, Bc);
    ExpectFusedWithinTwiceStandard(problem, "Br=" + std::to_string(Br) + " Bc=" + std::to_string(Bc));
  }
}

TEST(FusedKernelTest, DefaultTilingFillsL2WithWholeTilesAndIsOverridable) {
  AttentionParams params;
  const std::int64_t M = DetectedCpuCaches().l2.bytes / 4;  // floats
  for (std::int64_t d : {1, 64, 128, 256, 512}) {
    params.head_dim = d;
    const forward_kernel::FusedTiling tiling = forward_kernel::ChooseFusedTiling(params);
    EXPECT_EQ(tiling.Br % 6, 0) << d;
    EXPECT_EQ(tiling.Bc % 32, 0) << d;
    EXPECT_GE(tiling.Bc, 32) << d;
    // Q_i, S_ij, Õ (Br rows) and K_j, V_j (Bc rows) fit in the L2 together, or Br is the minimum 6.
    EXPECT_TRUE(tiling.Br * (2 * d + tiling.Bc) + tiling.Bc * 2 * d <= M || tiling.Br == 6) << d;
  }
  params.head_dim = 128;
  const forward_kernel::FusedTiling tiling = forward_kernel::ChooseFusedTiling(params);
  params.tiling.block_rows = 3;
  EXPECT_EQ(forward_kernel::ChooseFusedTiling(params).Br, 3);
  EXPECT_EQ(forward_kernel::ChooseFusedTiling(params).Bc, tiling.Bc);
}

// A mask tensor read through unusual strides: transposed (row stride 1) and broadcast over rows.
TEST(FusedKernelTest, MaskTensorWithTransposedAndBroadcastStridesMatchesOracle) {
  for (MaskKind kind : {MaskKind::kBool, MaskKind::kAdditive}) {
    Problem transposed({.Nq = 50, .Nk = 50, .Hq = 2, .d = 24, .dv = 24}, {.mask = kind}, 5);
    transposed.params().mask.stride_row = 1;
    transposed.params().mask.stride_col = 50;
    ExpectFusedWithinTwiceStandard(transposed, "transposed mask");
    Problem broadcast({.Nq = 33, .Nk = 70, .Hq = 2, .d = 24, .dv = 24}, {.mask = kind}, 6);
    broadcast.params().mask.stride_row = 0;
    broadcast.params().mask.stride_head = 0;
    ExpectFusedWithinTwiceStandard(broadcast, "row-broadcast mask");
  }
}

// Causal with Nq > Nk: the first Nq − Nk rows see no key; a boolean mask drops every key of row 3.
TEST(FusedKernelTest, RowsWithoutVisibleKeyGiveZerosAndNegativeInfinityLse) {
  for (std::int64_t target : TargetsUnderTest()) {
    simd::RestrictTargetForTest(target);
    Problem causal({.Nq = 40, .Nk = 9, .d = 8, .dv = 8}, {.causal = true}, 3);
    forward(causal.params(), Algorithm::kFused);
    for (std::int64_t i = 0; i < 31; ++i) {
      EXPECT_EQ(causal.Lse(0, 0, i), -std::numeric_limits<float>::infinity()) << "row " << i;
      for (std::int64_t c = 0; c < 8; ++c) EXPECT_EQ(causal.O(0, i, 0, c), 0.0f) << "row " << i;
    }
    for (std::int64_t i = 31; i < 40; ++i) EXPECT_TRUE(std::isfinite(causal.Lse(0, 0, i))) << "row " << i;

    Problem masked({.Nq = 8, .Nk = 30, .d = 8, .dv = 8}, {.mask = MaskKind::kBool}, 4);
    std::vector<std::uint8_t> keep(8 * 30, 1);
    std::fill(keep.begin() + 3 * 30, keep.begin() + 4 * 30, 0);
    masked.params().mask = {MaskKind::kBool, keep.data(), 0, 0, 30, 1};
    forward(masked.params(), Algorithm::kFused);
    EXPECT_EQ(masked.Lse(0, 0, 3), -std::numeric_limits<float>::infinity());
    for (std::int64_t c = 0; c < 8; ++c) EXPECT_EQ(masked.O(0, 3, 0, c), 0.0f);
    EXPECT_LE(CompareWithOracle(masked).o_error, 1e-5);
  }
  simd::RestrictTargetForTest(0);
}

TEST(FusedKernelTest, EmptySequencesWriteZerosOrNothing) {
  Problem no_keys({.Nq = 3, .Nk = 0, .d = 8, .dv = 8}, {}, 3);
  forward(no_keys.params(), Algorithm::kFused);
  for (std::int64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(no_keys.Lse(0, 0, i), -std::numeric_limits<float>::infinity());
    for (std::int64_t c = 0; c < 8; ++c) EXPECT_EQ(no_keys.O(0, i, 0, c), 0.0f);
  }
  Problem no_queries({.Nq = 0, .Nk = 9, .d = 8, .dv = 8}, {}, 3);
  EXPECT_NO_THROW(forward(no_queries.params(), Algorithm::kFused));
}

// Inputs whose scores are large (scale 8 → |S| in the hundreds): the online rescaling must not overflow.
TEST(FusedKernelTest, LargeLogitsStayFiniteAndAccurate) {
  Problem problem({.Nq = 97, .Nk = 300, .Hq = 2, .d = 64, .dv = 64}, {.causal = true}, 9, /*input_scale=*/8.0f);
  ExpectFusedWithinTwiceStandard(problem, "large logits");
}

// A head whose packed K and V exceed the kernel's packing budget (16 MiB): V_j is then copied per tile
// instead of packed once per head, a path the short sequences above never take.
TEST(FusedKernelTest, LongKeySequenceBeyondThePackingBudgetMatchesOracle) {
  Problem problem({.Nq = 13, .Nk = 16500, .Hq = 2, .Hkv = 1, .d = 128, .dv = 128},
                  {.window_left = 9000, .softcap = 20.0f}, 12);
  ExpectFusedWithinTwiceStandard(problem, "Nk=16500");
}

// Dropout inside the kernel: the same regenerated keep decisions as the oracle, every target, both masks'
// tile paths, GQA, tails, reduced precision, and tiles smaller than a row (several generator calls per row).
TEST(FusedKernelTest, DropoutMatchesOracleOnEveryTarget) {
  for (DType dtype : {DType::kF32, DType::kF16}) {
    for (float p : {0.1f, 0.5f}) {
      Problem problem({.batch = 2, .Nq = 97, .Nk = 113, .Hq = 4, .Hkv = 2, .d = 40, .dv = 33, .dtype = dtype},
                      {.causal = true, .window_left = 60}, 13);
      problem.params().dropout_p = p;
      problem.params().dropout_seed = 0x1234567890ull;
      problem.params().dropout_offset = 5;
      ExpectFusedWithinTwiceStandard(problem, "dropout " + std::to_string(p));
      problem.params().tiling.block_rows = 7;
      problem.params().tiling.block_cols = 17;
      ExpectFusedWithinTwiceStandard(problem, "dropout, 7x17 tiles");
    }
  }
}

TEST(FusedKernelTest, FusedIsTheDefaultAlgorithm) {
  Problem problem({.Nq = 20, .Nk = 30, .d = 16, .dv = 16}, {}, 2);
  forward(problem.params());
  std::vector<float> by_default;
  for (std::int64_t i = 0; i < 20; ++i) by_default.push_back(problem.O(0, i, 0, 0));
  problem.ResetOutputs();
  forward(problem.params(), Algorithm::kFused);
  for (std::int64_t i = 0; i < 20; ++i) EXPECT_EQ(problem.O(0, i, 0, 0), by_default[i]);
  EXPECT_EQ(parse_algorithm("fused"), Algorithm::kFused);
  EXPECT_EQ(to_string(Algorithm::kFused), "fused");
}

}  // namespace
}  // namespace flashattn::testing
