// Dropout regenerated from Philox-4x32-10: the generator against Random123's known answers, the keep mask's
// statistics and keys, and forward/backward with dropout against a plain computation given the materialized
// mask.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backward_test_problem.h"
#include "common/dropout.h"
#include "flashattn/backward.h"

namespace flashattn::testing {
namespace {

// Random123's tests/kat_vectors lines for philox4x32 with 10 rounds: counter, key → output.
TEST(PhiloxTest, MatchesRandom123KnownAnswerVectors) {
  using W4 = std::array<std::uint32_t, 4>;
  using W2 = std::array<std::uint32_t, 2>;
  EXPECT_EQ(Philox4x32_10(W4{0, 0, 0, 0}, W2{0, 0}),
            (W4{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(Philox4x32_10(W4{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
                                     W2{0xffffffff, 0xffffffff}),
            (W4{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(Philox4x32_10(W4{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
                                     W2{0xa4093822, 0x299f31d0}),
            (W4{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

std::vector<std::uint8_t> Mask(const AttentionParams& params) {
  std::vector<std::uint8_t> keep(params.batch * params.heads_q * params.seqlen_q * params.seqlen_k);
  materialize_dropout_mask(params, keep.data());
  return keep;
}

double DroppedFraction(const std::vector<std::uint8_t>& keep) {
  std::int64_t dropped = 0;
  for (std::uint8_t k : keep) dropped += k == 0;
  return static_cast<double>(dropped) / static_cast<double>(keep.size());
}

TEST(DropoutMaskTest, DroppedFractionOf512x512IsWithin001OfP) {
  for (float p : {0.1f, 0.3f, 0.5f, 0.9f}) {
    Problem problem({.Nq = 512, .Nk = 512, .d = 8, .dv = 8}, {}, 1);
    problem.params().dropout_p = p;
    problem.params().dropout_seed = 42;
    EXPECT_NEAR(DroppedFraction(Mask(problem.params())), p, 0.01) << "p=" << p;
  }
}

TEST(DropoutMaskTest, SameSeedAndOffsetGiveSameMaskOtherOffsetOrSeedAnother) {
  Problem problem({.batch = 2, .Nq = 64, .Nk = 77, .Hq = 3, .Hkv = 1, .d = 8, .dv = 8}, {}, 1);
  AttentionParams& params = problem.params();
  params.dropout_p = 0.25f;
  params.dropout_seed = 1234;
  params.dropout_offset = 7;
  const auto base = Mask(params);
  EXPECT_EQ(Mask(params), base);
  params.dropout_offset = 8;
  const auto other_offset = Mask(params);
  params.dropout_offset = 7;
  params.dropout_seed = 1235;
  const auto other_seed = Mask(params);
  std::int64_t offset_differs = 0, seed_differs = 0;
  for (std::size_t n = 0; n < base.size(); ++n)
    offset_differs += base[n] != other_offset[n], seed_differs += base[n] != other_seed[n];
  // Independent masks at p = 0.25 differ in 2·p·(1 − p) = 37.5% of the elements.
  EXPECT_NEAR(static_cast<double>(offset_differs) / base.size(), 0.375, 0.02);
  EXPECT_NEAR(static_cast<double>(seed_differs) / base.size(), 0.375, 0.02);
}

TEST(DropoutMaskTest, ZeroProbabilityKeepsEverything) {
  Problem problem({.Nq = 9, .Nk = 13, .d = 8, .dv = 8}, {}, 1);
  for (std::uint8_t keep : Mask(problem.params())) EXPECT_EQ(keep, 1);
}

// Heads, rows and keys of one call get different decisions (no stream reused across (b, h, i)).
TEST(DropoutMaskTest, RowsAndHeadsAreNotCopiesOfEachOther) {
  Problem problem({.batch = 2, .Nq = 32, .Nk = 64, .Hq = 2, .Hkv = 2, .d = 8, .dv = 8}, {}, 1);
  problem.params().dropout_p = 0.5f;
  const auto keep = Mask(problem.params());
  const std::int64_t row = 64, head = 32 * row, batch = 2 * head;
  std::int64_t same_row = 0, same_head = 0, same_batch = 0;
  for (std::int64_t n = 0; n < row * 31; ++n) same_row += keep[n] == keep[n + row];
  for (std::int64_t n = 0; n < head; ++n)
    same_head += keep[n] == keep[n + head], same_batch += keep[n] == keep[n + batch];
  EXPECT_NEAR(static_cast<double>(same_row) / (row * 31), 0.5, 0.05);
  EXPECT_NEAR(static_cast<double>(same_head) / head, 0.5, 0.05);
  EXPECT_NEAR(static_cast<double>(same_batch) / head, 0.5, 0.05);
}

// Plain float64 attention with the materialized mask as an input:
//   P = softmax(s Q Kᵀ), O = (P ∘ M/(1 − p)) V; gradients of ⟨dO, O⟩ by the textbook formulas.
struct Plain {
  std::vector<double> O, dQ, dK, dV;
};
Plain PlainWithMask(const BackwardProblem& x, const std::vector<std::uint8_t>& keep, float p) {
  const Shape& s = x.shape();
  const std::int64_t Nq = s.Nq, Nk = s.Nk, d = s.d, dv = s.dv;
  const Problem& f = x.forward();
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  auto q = [&](std::int64_t i, std::int64_t c) {
    const Strides& st = f.params().q_strides;
    return static_cast<double>(static_cast<const float*>(f.params().q)[i * st.seq + c]);
  };
  auto k = [&](std::int64_t j, std::int64_t c) {
    const Strides& st = f.params().k_strides;
    return static_cast<double>(static_cast<const float*>(f.params().k)[j * st.seq + c]);
  };
  auto v = [&](std::int64_t j, std::int64_t c) {
    const Strides& st = f.params().v_strides;
    return static_cast<double>(static_cast<const float*>(f.params().v)[j * st.seq + c]);
  };
  auto dO = [&](std::int64_t i, std::int64_t c) {
    const Strides& st = x.params().do_strides;
    return static_cast<double>(static_cast<const float*>(x.params().d_o)[i * st.seq + c]);
  };
  Plain out{std::vector<double>(Nq * dv), std::vector<double>(Nq * d), std::vector<double>(Nk * d),
            std::vector<double>(Nk * dv)};
  std::vector<double> P(Nk), M(Nk), dP(Nk);
  for (std::int64_t i = 0; i < Nq; ++i) {
    double max = -INFINITY, sum = 0.0;
    for (std::int64_t j = 0; j < Nk; ++j) {
      P[j] = 0.0;
      for (std::int64_t c = 0; c < d; ++c) P[j] += scale * q(i, c) * k(j, c);
      max = std::max(max, P[j]);
      M[j] = keep[i * Nk + j] / (1.0 - p);
    }
    for (std::int64_t j = 0; j < Nk; ++j) sum += P[j] = std::exp(P[j] - max);
    for (std::int64_t j = 0; j < Nk; ++j) P[j] /= sum;
    for (std::int64_t j = 0; j < Nk; ++j)
      for (std::int64_t c = 0; c < dv; ++c) out.O[i * dv + c] += P[j] * M[j] * v(j, c);
    // dO → d(P∘M) = dO Vᵀ → dP = M ∘ dO Vᵀ → dS = P ∘ (dP − Σ_j P_j dP_j) → dQ, dK
    double P_dot_dP = 0.0;
    for (std::int64_t j = 0; j < Nk; ++j) {
      double g = 0.0;
      for (std::int64_t c = 0; c < dv; ++c) g += dO(i, c) * v(j, c);
      dP[j] = M[j] * g;
      P_dot_dP += P[j] * dP[j];
      for (std::int64_t c = 0; c < dv; ++c) out.dV[j * dv + c] += P[j] * M[j] * dO(i, c);
    }
    for (std::int64_t j = 0; j < Nk; ++j) {
      const double dS = P[j] * (dP[j] - P_dot_dP);
      for (std::int64_t c = 0; c < d; ++c) out.dQ[i * d + c] += scale * dS * k(j, c);
      for (std::int64_t c = 0; c < d; ++c) out.dK[j * d + c] += scale * dS * q(i, c);
    }
  }
  return out;
}

double RelativeError(const std::vector<double>& expected, auto actual) {
  double max_diff = 0.0, max_ref = 0.0;
  for (std::size_t n = 0; n < expected.size(); ++n) {
    const double diff = std::fabs(actual(n) - expected[n]);
    max_diff = std::isnan(diff) ? INFINITY : std::max(max_diff, diff);
    max_ref = std::max(max_ref, std::fabs(expected[n]));
  }
  return max_diff / max_ref;
}

class DropoutAgreementTest : public ::testing::TestWithParam<Algorithm> {};

TEST_P(DropoutAgreementTest, ForwardAndBackwardEqualPlainComputationGivenMaterializedMask) {
  const Shape shape{.Nq = 70, .Nk = 83, .d = 24, .dv = 24};
  BackwardProblem x(shape, {}, 5, {.p = 0.3f, .seed = 99, .offset = 3}, GetParam());
  const auto keep = Mask(x.params().attention);
  const Plain plain = PlainWithMask(x, keep, 0.3f);
  EXPECT_LE(RelativeError(plain.O, [&](std::size_t n) { return x.forward().O(0, n / 24, 0, n % 24); }), 2e-6);
  for (BackwardAlgorithm algorithm :
       {BackwardAlgorithm::kFused, BackwardAlgorithm::kStandard, BackwardAlgorithm::kOracle}) {
    x.ResetGradients();
    backward(x.params(), algorithm);
    EXPECT_LE(RelativeError(plain.dQ, [&](std::size_t n) { return x.dQ(0, n / 24, 0, n % 24); }), 1e-5);
    EXPECT_LE(RelativeError(plain.dK, [&](std::size_t n) { return x.dK(0, n / 24, 0, n % 24); }), 1e-5);
    EXPECT_LE(RelativeError(plain.dV, [&](std::size_t n) { return x.dV(0, n / 24, 0, n % 24); }), 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(EveryForward, DropoutAgreementTest,
                         ::testing::Values(Algorithm::kStandard, Algorithm::kFlash1, Algorithm::kFlash2,
                                           Algorithm::kFused, Algorithm::kOracle),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// Dropout changes the output: with p = 0.5 the forward pass differs from the one without dropout.
TEST(DropoutForwardTest, DropoutChangesTheOutputButNotTheLse) {
  BackwardProblem with({.Nq = 16, .Nk = 40, .d = 8, .dv = 8}, {}, 5, {.p = 0.5f, .seed = 1});
  BackwardProblem without({.Nq = 16, .Nk = 40, .d = 8, .dv = 8}, {}, 5);
  double diff = 0.0;
  for (std::int64_t i = 0; i < 16; ++i) {
    EXPECT_FLOAT_EQ(with.forward().Lse(0, 0, i), without.forward().Lse(0, 0, i));
    for (std::int64_t c = 0; c < 8; ++c)
      diff =
          std::max<double>(diff, std::fabs(with.forward().O(0, i, 0, c) - without.forward().O(0, i, 0, c)));
  }
  EXPECT_GT(diff, 0.1);
}

}  // namespace
}  // namespace flashattn::testing
