// The fused kernel's vector exp against std::exp (correctly rounded through double), on every SIMD target:
// at most 2 ulp wherever the result is a normal float below 2^127.5, exactly 0 at −∞, 0 or a value below
// FLT_MIN under −87.34, +∞ above 88.38, NaN for NaN.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <vector>

#include "simd/targets.h"
#include "test_targets.h"

namespace flashattn::testing {
namespace {

// Distance in units in the last place between two finite floats of the same sign.
std::int64_t UlpDistance(float a, float b) {
  return std::llabs(static_cast<std::int64_t>(std::bit_cast<std::int32_t>(a)) - std::bit_cast<std::int32_t>(b));
}

// Every 61st float of [lo, hi] with lo < 0 < hi, walking the bit patterns of each sign (about 35 million
// values over the full range), plus both ends.
std::vector<float> DenseSweep(float lo, float hi) {
  std::vector<float> x;
  for (std::int64_t bits = std::bit_cast<std::int32_t>(-lo); bits >= 0; bits -= 61)
    x.push_back(-std::bit_cast<float>(static_cast<std::int32_t>(bits)));
  for (std::int64_t bits = 0; bits <= std::bit_cast<std::int32_t>(hi); bits += 61)
    x.push_back(std::bit_cast<float>(static_cast<std::int32_t>(bits)));
  x.push_back(lo);
  x.push_back(hi);
  return x;
}

TEST(FusedExpTest, WithinTwoUlpOverNormalRangeOnEveryTarget) {
  const std::vector<float> x = DenseSweep(-87.3365f, 88.376f);
  std::vector<float> y(x.size());
  for (std::int64_t target : TargetsUnderTest()) {
    simd::RestrictTargetForTest(target);
    simd::VectorExp(x.data(), y.data(), x.size());
    std::int64_t worst = 0;
    float worst_x = 0.0f;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const float expected = static_cast<float>(std::exp(static_cast<double>(x[i])));
      const std::int64_t ulp = UlpDistance(y[i], expected);
      if (ulp > worst) worst = ulp, worst_x = x[i];
    }
    EXPECT_LE(worst, 2) << simd::TargetName(target) << " worst at x = " << worst_x;
    RecordProperty(simd::TargetName(target) + "_max_ulp", static_cast<int>(worst));
  }
  simd::RestrictTargetForTest(0);
}

TEST(FusedExpTest, SpecialValuesOnEveryTarget) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  // Odd length: the last element goes through the single-lane tail.
  const std::vector<float> x = {-inf, 0.0f, -0.0f, -87.34f, -100.0f, -1e30f, 88.38f, 1e30f, inf, nan, -nan};
  for (std::int64_t target : TargetsUnderTest()) {
    simd::RestrictTargetForTest(target);
    std::vector<float> y(x.size(), -1.0f);
    simd::VectorExp(x.data(), y.data(), x.size());
    const std::string name = simd::TargetName(target);
    EXPECT_EQ(std::bit_cast<std::uint32_t>(y[0]), 0u) << name << ": e^−∞ must be exactly +0";
    EXPECT_EQ(y[1], 1.0f) << name;
    EXPECT_EQ(y[2], 1.0f) << name;
    EXPECT_GE(y[3], 0.0f) << name;
    EXPECT_LE(y[3], std::numeric_limits<float>::min()) << name;
    EXPECT_EQ(y[4], 0.0f) << name;
    EXPECT_EQ(y[5], 0.0f) << name;
    EXPECT_EQ(y[6], inf) << name;
    EXPECT_EQ(y[7], inf) << name;
    EXPECT_EQ(y[8], inf) << name;
    EXPECT_TRUE(std::isnan(y[9])) << name;  // on emulated targets also a UBSan regression (vec_exp-inl.h)
    EXPECT_TRUE(std::isnan(y[10])) << name;
  }
  simd::RestrictTargetForTest(0);
}

// The softmax's variant drops only the overflow test: bit-identical to Exp wherever it is defined (up to
// 88.37, which includes every S − max ≤ 0), NaN included.
TEST(FusedExpTest, NonPositiveVariantEqualsExpOnItsDomainOnEveryTarget) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = DenseSweep(-88.0f, 88.376f);
  for (float special : {-inf, -1e30f, -100.0f, -87.34f, -0.0f, nan}) x.push_back(special);
  std::vector<float> expected(x.size()), y(x.size());
  for (std::int64_t target : TargetsUnderTest()) {
    simd::RestrictTargetForTest(target);
    simd::VectorExp(x.data(), expected.data(), x.size());
    simd::VectorExpOfNonPositive(x.data(), y.data(), x.size());
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (std::bit_cast<std::uint32_t>(y[i]) != std::bit_cast<std::uint32_t>(expected[i]) &&
          !(std::isnan(y[i]) && std::isnan(expected[i])) && mismatches++ < 3) {
        ADD_FAILURE() << simd::TargetName(target) << " x = " << x[i] << ": " << y[i] << " vs " << expected[i];
      }
    }
    EXPECT_EQ(mismatches, 0u) << simd::TargetName(target);
    EXPECT_EQ(std::bit_cast<std::uint32_t>(y[x.size() - 6]), 0u) << "e^−∞ must be exactly +0";
  }
  simd::RestrictTargetForTest(0);
}

}  // namespace
}  // namespace flashattn::testing
