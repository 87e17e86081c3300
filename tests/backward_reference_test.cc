// The reference backward passes: the float64 oracle's analytic gradients against central finite differences
// of its own loss ⟨dO, O(Q, K, V)⟩, the float32 standard backward against the oracle, and rows that see no
// key.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "backward_test_problem.h"
#include "reference/backward.h"

namespace flashattn::testing {
namespace {

// Inputs on a grid of 2⁻¹² in [−4, 4], so that q ± 2⁻¹⁰ is exact in float32 and the finite difference sees
// exactly the perturbation it divides by.
float OnGrid(std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  return std::round(std::clamp(normal(rng), -3.9f, 3.9f) * 4096.0f) / 4096.0f;
}

struct FiniteDifferenceCase {
  Shape shape;
  Modifiers modifiers;
  Dropout dropout;
};

class OracleFiniteDifferenceTest : public ::testing::TestWithParam<FiniteDifferenceCase> {};

TEST_P(OracleFiniteDifferenceTest, AnalyticGradientsMatchCentralDifferences) {
  const auto& [shape, modifiers, dropout] = GetParam();
  BackwardProblem x(shape, modifiers, 11, dropout, Algorithm::kOracle);
  Problem& f = x.forward();
  std::mt19937_64 rng(3);
  const std::int64_t group = shape.Hq / shape.Hkv;
  for (std::int64_t i = 0; i < shape.Nq; ++i)
    for (std::int64_t h = 0; h < shape.Hq; ++h)
      for (std::int64_t c = 0; c < shape.d; ++c) f.SetQ(0, i, h, c, OnGrid(rng));
  for (std::int64_t j = 0; j < shape.Nk; ++j)
    for (std::int64_t h = 0; h < shape.Hkv; ++h) {
      for (std::int64_t c = 0; c < shape.d; ++c) f.SetK(0, j, h, c, OnGrid(rng));
      for (std::int64_t c = 0; c < shape.dv; ++c) f.SetV(0, j, h, c, OnGrid(rng));
    }
  const double step = 0x1p-10;
  // dL/dx ≈ (L(x + step) − L(x − step)) / 2·step, setting the element through `set` (exact on the grid).
  auto difference = [&](auto set, float value) {
    set(value + static_cast<float>(step));
    const double plus = reference::OracleLoss(x.params());
    set(value - static_cast<float>(step));
    const double minus = reference::OracleLoss(x.params());
    set(value);
    return (plus - minus) / (2 * step);
  };
  for (std::int64_t hkv = 0; hkv < shape.Hkv; ++hkv) {
    const reference::OracleGradients g = reference::OracleBackwardGroup(x.params(), 0, hkv);
    double max_grad = 0.0, max_diff = 0.0;
    auto check = [&](double analytic, double numeric) {
      max_grad = std::max(max_grad, std::fabs(analytic));
      max_diff = std::max(max_diff, std::fabs(analytic - numeric));
    };
    for (std::int64_t hg = 0; hg < group; ++hg) {
      const std::int64_t h = hkv * group + hg;
      for (std::int64_t i = 0; i < shape.Nq; ++i) {
        for (std::int64_t c = 0; c < shape.d; ++c) {
          const float q = static_cast<const float*>(
              f.params().q)[i * f.params().q_strides.seq + h * f.params().q_strides.head + c];
          check(g.dQ[(hg * shape.Nq + i) * shape.d + c],
                difference([&](float v) { f.SetQ(0, i, h, c, v); }, q));
        }
      }
    }
    for (std::int64_t j = 0; j < shape.Nk; ++j) {
      for (std::int64_t c = 0; c < shape.d; ++c) {
        const float k = static_cast<const float*>(
            f.params().k)[j * f.params().k_strides.seq + hkv * f.params().k_strides.head + c];
        check(g.dK[j * shape.d + c], difference([&](float v) { f.SetK(0, j, hkv, c, v); }, k));
      }
      for (std::int64_t c = 0; c < shape.dv; ++c) {
        const float v0 = static_cast<const float*>(
            f.params().v)[j * f.params().v_strides.seq + hkv * f.params().v_strides.head + c];
        check(g.dV[j * shape.dv + c], difference([&](float v) { f.SetV(0, j, hkv, c, v); }, v0));
      }
    }
    EXPECT_GT(max_grad, 0.01);
    EXPECT_LE(max_diff, 1e-5 * max_grad)
        << "max |analytic − numeric| = " << max_diff << ", max |grad| = " << max_grad;
  }
}

const Shape kSmall{.Nq = 5, .Nk = 7, .Hq = 2, .Hkv = 1, .d = 4, .dv = 3};
INSTANTIATE_TEST_SUITE_P(
    Modifiers, OracleFiniteDifferenceTest,
    ::testing::Values(FiniteDifferenceCase{kSmall, {}, {}},
                      FiniteDifferenceCase{kSmall, {.causal = true}, {}},
                      FiniteDifferenceCase{kSmall, {.window_left = 2, .window_right = 1}, {}},
                      FiniteDifferenceCase{kSmall, {.softcap = 2.0f}, {}},
                      FiniteDifferenceCase{kSmall, {.alibi = true}, {}},
                      FiniteDifferenceCase{kSmall, {.mask = MaskKind::kBool}, {}},
                      FiniteDifferenceCase{kSmall, {.mask = MaskKind::kAdditive}, {}},
                      FiniteDifferenceCase{
                          kSmall, {.causal = true, .softcap = 3.0f, .alibi = true}, {.p = 0.4f, .seed = 8}},
                      FiniteDifferenceCase{
                          {.Nq = 9, .Nk = 4, .Hq = 3, .Hkv = 3, .d = 6, .dv = 6}, {.causal = true}, {}}),
    [](const auto& info) { return "case" + std::to_string(info.index); });

// The float32 standard backward is accurate to float32 rounding against the oracle.
TEST(StandardBackwardTest, Float32StandardMatchesOracleWithin1e5) {
  for (const Modifiers& m :
       {Modifiers{}, Modifiers{.causal = true, .softcap = 4.0f, .alibi = true, .mask = MaskKind::kAdditive},
        Modifiers{.window_left = 9, .window_right = 3, .mask = MaskKind::kBool}}) {
    BackwardProblem x({.batch = 2, .Nq = 97, .Nk = 113, .Hq = 4, .Hkv = 2, .d = 40, .dv = 24}, m, 21);
    backward(x.params(), BackwardAlgorithm::kStandard);
    const GradientErrors e = CompareGradientsWithOracle(x);
    EXPECT_LE(e.dq, 1e-5) << m.ToString();
    EXPECT_LE(e.dk, 1e-5) << m.ToString();
    EXPECT_LE(e.dv, 1e-5) << m.ToString();
  }
}

// Causal with Nq > Nk: the first Nq − Nk rows see no key (LSE = −∞) and get exactly zero dQ; nothing is NaN.
TEST(BackwardEdgeTest, RowsWithoutVisibleKeyGetZeroGradientsNeverNaN) {
  for (BackwardAlgorithm algorithm :
       {BackwardAlgorithm::kStandard, BackwardAlgorithm::kFused, BackwardAlgorithm::kOracle}) {
    BackwardProblem x({.Nq = 20, .Nk = 5, .d = 8, .dv = 8}, {.causal = true}, 3);
    backward(x.params(), algorithm);
    for (std::int64_t i = 0; i < 15; ++i)
      for (std::int64_t c = 0; c < 8; ++c) EXPECT_EQ(x.dQ(0, i, 0, c), 0.0f);
    const GradientErrors e = CompareGradientsWithOracle(x);
    EXPECT_LE(std::max({e.dq, e.dk, e.dv}), 1e-5) << static_cast<int>(algorithm);
  }
}

TEST(BackwardEdgeTest, EmptyKeysGiveZeroDqAndEmptyQueriesZeroDkDv) {
  for (BackwardAlgorithm algorithm :
       {BackwardAlgorithm::kStandard, BackwardAlgorithm::kFused, BackwardAlgorithm::kOracle}) {
    BackwardProblem no_keys({.Nq = 3, .Nk = 0, .d = 8, .dv = 8}, {}, 3);
    backward(no_keys.params(), algorithm);
    for (std::int64_t i = 0; i < 3; ++i)
      for (std::int64_t c = 0; c < 8; ++c) EXPECT_EQ(no_keys.dQ(0, i, 0, c), 0.0f);
    BackwardProblem no_queries({.Nq = 0, .Nk = 4, .d = 8, .dv = 8}, {}, 3);
    backward(no_queries.params(), algorithm);
    for (std::int64_t j = 0; j < 4; ++j) {
      for (std::int64_t c = 0; c < 8; ++c) EXPECT_EQ(no_queries.dK(0, j, 0, c), 0.0f);
      for (std::int64_t c = 0; c < 8; ++c) EXPECT_EQ(no_queries.dV(0, j, 0, c), 0.0f);
    }
  }
}

}  // namespace
}  // namespace flashattn::testing
