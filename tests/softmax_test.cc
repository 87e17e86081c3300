// Properties of the softmax family (docs/algorithms.md §1, src/reference/softmax.h): the four methods agree with a
// float64 softmax on ordinary logits; the (m, d) state is a commutative monoid whose merge gives the safe
// softmax for any split, order and grouping; rows of −∞ are empty distributions; logits ×100 break only
// the naive method.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "reference/softmax.h"

namespace flashattn::reference {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
// Element-wise relative tolerance against float64: the project's 1e-5. Rounding x_i − m in float32 alone
// gives y_i a relative error up to |x_i − m|·2⁻²⁴, about 5e-6 for the largest gap (≈ 87) whose e^{x_i − m}
// is still a normal float; below float32's normal range only absolute precision is left, so differences
// under its smallest normal value are not counted.
constexpr double kRelTolerance = 1e-5;
constexpr double kAbsFloor = std::numeric_limits<float>::min();

// The exact softmax of float32 logits, computed in float64: zeros for an empty distribution.
struct Float64Softmax {
  std::vector<double> y;
  double lse;  // log Σ e^{x}
};
Float64Softmax SoftmaxFloat64(std::span<const float> x) {
  double m = -std::numeric_limits<double>::infinity();
  for (float x_j : x) m = std::max(m, static_cast<double>(x_j));
  Float64Softmax result{std::vector<double>(x.size(), 0.0), m};
  if (m == -std::numeric_limits<double>::infinity()) return result;
  double d = 0.0;
  for (float x_j : x) d += std::exp(x_j - m);
  for (std::size_t i = 0; i < x.size(); ++i) result.y[i] = std::exp(x[i] - m) / d;
  result.lse = m + std::log(d);
  return result;
}

// Largest |y_i − ref_i| / ref_i over the row, ignoring differences below kAbsFloor; +inf for a NaN.
double MaxRelativeError(std::span<const float> y, std::span<const double> ref) {
  double worst = 0.0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    const double diff = std::fabs(y[i] - ref[i]);
    if (std::isnan(diff)) return kInf;
    if (diff > kAbsFloor) worst = std::max(worst, diff / ref[i]);
  }
  return worst;
}

bool AllFinite(std::span<const float> y) {
  return std::all_of(y.begin(), y.end(), [](float v) { return std::isfinite(v); });
}

std::vector<float> RandomLogits(std::mt19937_64& rng, std::size_t n, float scale) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& x_i : x) x_i = scale * normal(rng);
  return x;
}

// y_i = e^{x_i − m} / d from a finished state, as the blocked softmax writes it.
std::vector<float> Normalize(std::span<const float> x, const SoftmaxState& state) {
  std::vector<float> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    y[i] = state.d == 0.0f ? 0.0f : std::exp(x[i] - state.m) / state.d;
  return y;
}

// Cuts x into blocks at random points, takes each block's state, then merges the states along a random
// binary tree: two random states (in random operand order) are combined until one is left.
SoftmaxState MergeRandomTree(std::span<const float> x, std::mt19937_64& rng) {
  std::vector<SoftmaxState> states;
  std::uniform_int_distribution<std::size_t> block_length(1, std::max<std::size_t>(1, x.size() / 3));
  for (std::size_t start = 0; start < x.size();) {
    const std::size_t length = std::min(block_length(rng), x.size() - start);
    states.push_back(SoftmaxState::Of(x.subspan(start, length)));
    start += length;
  }
  if (states.empty()) return SoftmaxState::Identity();
  while (states.size() > 1) {
    std::uniform_int_distribution<std::size_t> pick(0, states.size() - 1);
    const std::size_t a = pick(rng);
    std::size_t b = pick(rng);
    while (b == a) b = pick(rng);
    states[a] = SoftmaxState::Combine(states[a], states[b]);
    states.erase(states.begin() + static_cast<std::ptrdiff_t>(b));
  }
  return states.front();
}

bool SameBits(const SoftmaxState& a, const SoftmaxState& b) {
  return std::bit_cast<std::uint32_t>(a.m) == std::bit_cast<std::uint32_t>(b.m) &&
         std::bit_cast<std::uint32_t>(a.d) == std::bit_cast<std::uint32_t>(b.d);
}

constexpr std::size_t kLengths[] = {1, 2, 7, 64, 97, 113, 1025};

TEST(SoftmaxTest, NaiveSafeOnlineBlockedMatchFloat64OnOrdinaryLogits) {
  std::mt19937_64 rng(1);
  for (std::size_t n : kLengths) {
    const std::vector<float> x = RandomLogits(rng, n, 3.0f);
    const Float64Softmax ref = SoftmaxFloat64(x);
    std::vector<float> y(n);
    SoftmaxNaive(x, y);
    EXPECT_LE(MaxRelativeError(y, ref.y), kRelTolerance) << "naive n=" << n;
    SoftmaxSafe(x, y);
    EXPECT_LE(MaxRelativeError(y, ref.y), kRelTolerance) << "safe n=" << n;
    SoftmaxOnline(x, y);
    EXPECT_LE(MaxRelativeError(y, ref.y), kRelTolerance) << "online n=" << n;
    const auto N = static_cast<std::int64_t>(n);
    for (std::int64_t block : std::vector<std::int64_t>{1, 3, 16, N, N + 5}) {
      SoftmaxBlocked(x, y, block);
      EXPECT_LE(MaxRelativeError(y, ref.y), kRelTolerance) << "blocked n=" << n << " block=" << block;
    }
  }
}

TEST(SoftmaxTest, OnlineStateHasSafeMaximumExactlyAndSafeSumAndLogSumExpWithinRounding) {
  std::mt19937_64 rng(2);
  for (std::size_t n : kLengths) {
    const std::vector<float> x = RandomLogits(rng, n, 3.0f);
    std::vector<float> y(n);
    const SoftmaxState safe = SoftmaxSafe(x, y);
    const SoftmaxState online = SoftmaxState::Of(x);
    EXPECT_EQ(online.m, safe.m) << "n=" << n;  // a maximum does not depend on the order it is taken in
    EXPECT_NEAR(online.d, safe.d, kRelTolerance * safe.d) << "n=" << n;
    const double lse = SoftmaxFloat64(x).lse;
    EXPECT_NEAR(online.LogSumExp(), lse, kRelTolerance * std::max(1.0, std::fabs(lse))) << "n=" << n;
  }
}

// The property FlashAttention's tiles rest on: any split, any merge order, any grouping.
TEST(SoftmaxTest, RandomSplitsMergedAlongRandomBinaryTreesEqualSafeSoftmax) {
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<std::size_t> length(1, 400);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<float> x = RandomLogits(rng, length(rng), trial % 3 == 0 ? 30.0f : 3.0f);
    if (trial % 2 == 1) {  // masked logits, sometimes whole blocks of them, exercise the −∞ merge path
      for (float& x_i : x) if (uniform(rng) < 0.4f) x_i = -kInf;
      x[x.size() / 2] = 0.5f;  // keep the distribution non-empty (empty rows are tested below)
    }
    std::vector<float> y_safe(x.size());
    const SoftmaxState safe = SoftmaxSafe(x, y_safe);
    const SoftmaxState merged = MergeRandomTree(x, rng);
    ASSERT_EQ(merged.m, safe.m) << "trial " << trial;
    ASSERT_NEAR(merged.d, safe.d, kRelTolerance * safe.d) << "trial " << trial;
    const std::vector<float> y_merged = Normalize(x, merged);
    std::vector<double> y_safe_wide(y_safe.begin(), y_safe.end());
    ASSERT_LE(MaxRelativeError(y_merged, y_safe_wide), kRelTolerance) << "trial " << trial;
    ASSERT_LE(MaxRelativeError(y_merged, SoftmaxFloat64(x).y), kRelTolerance) << "trial " << trial;
  }
}

TEST(SoftmaxTest, CombineWithIdentityOnEitherSideReturnsStateBitwise) {
  std::mt19937_64 rng(4);
  std::vector<SoftmaxState> states = {SoftmaxState::Identity(), {0.0f, 1.0f}, {-0.0f, 1.0f},
                                      {-87.0f, 3.5f}, {1e30f, 1.0f}, {-1e30f, 7.0f}};
  for (std::size_t n : kLengths) states.push_back(SoftmaxState::Of(RandomLogits(rng, n, 10.0f)));
  for (const SoftmaxState& s : states) {
    EXPECT_TRUE(SameBits(SoftmaxState::Combine(SoftmaxState::Identity(), s), s)) << s.m << ", " << s.d;
    EXPECT_TRUE(SameBits(SoftmaxState::Combine(s, SoftmaxState::Identity()), s)) << s.m << ", " << s.d;
  }
  EXPECT_EQ(SoftmaxState::Identity().m, -kInf);
  EXPECT_EQ(SoftmaxState::Identity().d, 0.0f);
}

// Commutativity and associativity hold up to rounding of the rescaled sums; the maximum is exact.
TEST(SoftmaxTest, CombineIsCommutativeAndAssociativeWithinRounding) {
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<std::size_t> length(1, 50);
  auto random_state = [&] { return SoftmaxState::Of(RandomLogits(rng, length(rng), 5.0f)); };
  for (int trial = 0; trial < 1000; ++trial) {
    const SoftmaxState a = random_state(), b = random_state(), c = random_state();
    const SoftmaxState ab = SoftmaxState::Combine(a, b), ba = SoftmaxState::Combine(b, a);
    EXPECT_EQ(ab.m, ba.m);
    EXPECT_NEAR(ab.d, ba.d, 1e-6 * ab.d);
    const SoftmaxState left = SoftmaxState::Combine(ab, c);
    const SoftmaxState right = SoftmaxState::Combine(a, SoftmaxState::Combine(b, c));
    EXPECT_EQ(left.m, right.m);
    EXPECT_NEAR(left.d, right.d, 1e-6 * left.d);
  }
}

TEST(SoftmaxTest, RowsOfNegativeInfinityGiveZerosAndIdentityStateNeverNaN) {
  std::mt19937_64 rng(6);
  for (std::size_t n : kLengths) {
    const std::vector<float> x(n, -kInf);
    const std::vector<float> zeros(n, 0.0f);
    std::vector<float> y(n, std::numeric_limits<float>::quiet_NaN());
    EXPECT_TRUE(SameBits(SoftmaxSafe(x, y), SoftmaxState::Identity())) << "n=" << n;
    EXPECT_EQ(y, zeros) << "safe n=" << n;
    std::fill(y.begin(), y.end(), std::numeric_limits<float>::quiet_NaN());
    SoftmaxOnline(x, y);
    EXPECT_EQ(y, zeros) << "online n=" << n;
    for (std::int64_t block : {std::int64_t{1}, std::int64_t{4}, static_cast<std::int64_t>(n)}) {
      std::fill(y.begin(), y.end(), std::numeric_limits<float>::quiet_NaN());
      SoftmaxBlocked(x, y, block);
      EXPECT_EQ(y, zeros) << "blocked n=" << n << " block=" << block;
    }
    EXPECT_TRUE(SameBits(SoftmaxState::Of(x), SoftmaxState::Identity())) << "n=" << n;
    EXPECT_TRUE(SameBits(MergeRandomTree(x, rng), SoftmaxState::Identity())) << "n=" << n;
    EXPECT_EQ(SoftmaxState::Of(x).LogSumExp(), -kInf);
    // The textbook definition has no answer for an empty distribution: Σ e^{x} = 0 and 0/0 = NaN.
    SoftmaxNaive(x, y);
    EXPECT_TRUE(std::isnan(y[0])) << "n=" << n;
  }
}

// One NaN logit makes every output NaN, in every method, also among −∞ logits: std::max(−∞, NaN) is −∞,
// which took such a row for one without logits (y = 0) in the online and blocked methods.
TEST(SoftmaxTest, ANaNLogitMakesTheRowNaNAlsoAmongNegativeInfinity) {
  std::mt19937_64 rng(8);
  for (std::size_t n : kLengths) {
    for (bool among_infinities : {true, false}) {
      std::vector<float> x = among_infinities ? std::vector<float>(n, -kInf) : RandomLogits(rng, n, 3.0f);
      x[n / 2] = std::numeric_limits<float>::quiet_NaN();
      const std::string label = "n=" + std::to_string(n) + (among_infinities ? " among -inf" : " among logits");
      const auto all_nan = [](const std::vector<float>& y) {
        return std::all_of(y.begin(), y.end(), [](float v) { return std::isnan(v); });
      };
      std::vector<float> y(n, 0.0f);
      SoftmaxSafe(x, y);
      EXPECT_TRUE(all_nan(y)) << "safe " << label;
      std::fill(y.begin(), y.end(), 0.0f);
      SoftmaxOnline(x, y);
      EXPECT_TRUE(all_nan(y)) << "online " << label;
      for (std::int64_t block : {std::int64_t{1}, std::int64_t{4}, static_cast<std::int64_t>(n)}) {
        std::fill(y.begin(), y.end(), 0.0f);
        SoftmaxBlocked(x, y, block);
        EXPECT_TRUE(all_nan(y)) << "blocked " << label << " block=" << block;
      }
      EXPECT_TRUE(std::isnan(SoftmaxState::Of(x).LogSumExp())) << label;
      EXPECT_TRUE(std::isnan(MergeRandomTree(x, rng).LogSumExp())) << label;
    }
  }
}

TEST(SoftmaxTest, EmptyInputGivesIdentityState) {
  const std::vector<float> x;
  std::vector<float> y;
  EXPECT_TRUE(SameBits(SoftmaxSafe(x, y), SoftmaxState::Identity()));
  EXPECT_TRUE(SameBits(SoftmaxState::Of(x), SoftmaxState::Identity()));
  EXPECT_EQ(SoftmaxState::Identity().LogSumExp(), -kInf);
}

// The motivating example of docs/algorithms.md §1: logits ×100 overflow e^{x} (x > ln FLT_MAX ≈ 88.72) in the naive method,
// while the methods that subtract the maximum stay finite and exact.
TEST(SoftmaxTest, LogitsScaledBy100OverflowNaiveButNotSafeOnlineOrBlocked) {
  std::mt19937_64 rng(7);
  for (std::size_t n : {std::size_t{5}, std::size_t{64}, std::size_t{1025}}) {
    const std::vector<float> x = RandomLogits(rng, n, 100.0f);
    ASSERT_GT(*std::max_element(x.begin(), x.end()), std::log(std::numeric_limits<float>::max()))
        << "n=" << n << ": this seed must produce a logit whose exponential overflows";
    const Float64Softmax ref = SoftmaxFloat64(x);
    std::vector<float> y(n);
    SoftmaxNaive(x, y);
    EXPECT_FALSE(AllFinite(y)) << "naive n=" << n << " should overflow to inf or NaN";
    SoftmaxSafe(x, y);
    EXPECT_TRUE(AllFinite(y)) << "safe n=" << n;
    EXPECT_LE(MaxRelativeError(y, ref.y), kRelTolerance) << "safe n=" << n;
    SoftmaxOnline(x, y);
    EXPECT_TRUE(AllFinite(y)) << "online n=" << n;
    EXPECT_LE(MaxRelativeError(y, ref.y), kRelTolerance) << "online n=" << n;
    for (std::int64_t block : {std::int64_t{1}, std::int64_t{3}, std::int64_t{16}}) {
      SoftmaxBlocked(x, y, block);
      EXPECT_TRUE(AllFinite(y)) << "blocked n=" << n << " block=" << block;
      EXPECT_LE(MaxRelativeError(y, ref.y), kRelTolerance) << "blocked n=" << n << " block=" << block;
    }
    const SoftmaxState state = SoftmaxState::Of(x);
    EXPECT_NEAR(state.LogSumExp(), ref.lse, kRelTolerance * std::fabs(ref.lse)) << "n=" << n;
  }
}

TEST(SoftmaxTest, RescaleFactorOfNegativeInfinityIsZeroNeverNaN) {
  EXPECT_EQ(RescaleFactor(-kInf, -kInf), 0.0f);
  EXPECT_EQ(RescaleFactor(-kInf, 0.0f), 0.0f);
  EXPECT_EQ(RescaleFactor(-kInf, 1e30f), 0.0f);
  EXPECT_EQ(RescaleFactor(2.5f, 2.5f), 1.0f);
  EXPECT_FLOAT_EQ(RescaleFactor(1.0f, 3.0f), std::exp(-2.0f));
}

}  // namespace
}  // namespace flashattn::reference
