// The programs' access to the library (tools/support/): the row conversions against the library's scalar
// conversions on every compiled SIMD target (float16 inf and NaN included), and the oracle rows against the
// library's float64 oracle.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/element.h"
#include "simd/targets.h"
#include "support/elements.h"
#include "support/oracle.h"
#include "test_problem.h"
#include "test_targets.h"

namespace flashattn {
namespace {

// Runs fn() once per SIMD target under test (test_targets.h), with every dispatch restricted to it.
template <typename Fn>
void OnEveryTarget(const Fn& fn) {
  const std::vector<std::int64_t> targets = testing::TargetsUnderTest();
  for (std::int64_t target : targets) {
    simd::RestrictTargetForTest(target);
    SCOPED_TRACE(simd::TargetName(target));
    fn();
  }
  simd::RestrictTargetForTest(0);
}

// Values that exercise rounding, subnormals, infinities and NaN in all three element types.
std::vector<float> AwkwardValues(std::int64_t n) {
  std::vector<float> x(static_cast<std::size_t>(n));
  const float specials[] = {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 1e-7f, -3e-5f, 1e30f,
                            std::numeric_limits<float>::infinity(), 0.1f, 1.0f / 3, 70000.0f};
  for (std::int64_t i = 0; i < n; ++i) x[i] = specials[i % 12] * (1.0f + 0.001f * static_cast<float>(i));
  return x;
}

TEST(SupportElements, RowsMatchTheScalarConversionsAtEveryLength) {
  OnEveryTarget([] {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (std::int64_t n = 0; n <= 40; ++n) {
        const std::vector<float> x = AwkwardValues(n);
        std::vector<std::uint16_t> stored(static_cast<std::size_t>(2 * n + 2), 0xabcd);
        support::ConvertFromF32(x.data(), n, dtype, stored.data());
        EXPECT_EQ(stored[static_cast<std::size_t>(n * size_of(dtype) / 2)], 0xabcd) << "wrote past n";
        std::vector<float> back(static_cast<std::size_t>(n + 1), -1.0f);
        support::ConvertToF32(stored.data(), dtype, n, back.data());
        EXPECT_EQ(back[n], -1.0f) << "wrote past n";
        for (std::int64_t i = 0; i < n; ++i) {
          const float expected = RoundTo(dtype, x[i]);
          EXPECT_TRUE(back[i] == expected || (std::isnan(back[i]) && std::isnan(expected)))
              << to_string(dtype) << " n=" << n << " i=" << i << ": " << x[i] << " -> " << back[i] << ", want "
              << expected;
          EXPECT_EQ(support::LoadAsFloat(stored.data(), dtype, i), back[i]);
        }
      }
    }
  });
}

// Every float16 with exponent 31 stays what it is: ±inf exactly, a NaN a NaN of the same sign (a conversion
// instruction may set the quiet bit of a signalling NaN); the edges of the finite range widen bit for bit.
// In full vectors and in the tail.
TEST(SupportElements, Float16InfAndNanSurviveWideningOnEveryTarget) {
  std::vector<std::uint16_t> halves = {0x0000, 0x8000, 0x0001, 0x03ff, 0x0400, 0x7bff, 0xfbff};
  for (std::uint16_t mantissa : {0x000, 0x001, 0x200, 0x155, 0x3ff}) {
    halves.push_back(static_cast<std::uint16_t>(0x7c00 | mantissa));
    halves.push_back(static_cast<std::uint16_t>(0xfc00 | mantissa));
  }
  OnEveryTarget([&] {
    std::vector<float> wide(halves.size());
    support::ConvertToF32(halves.data(), DType::kF16, static_cast<std::int64_t>(halves.size()), wide.data());
    for (std::size_t i = 0; i < halves.size(); ++i) {
      const float expected = F32FromF16(halves[i]);
      if (std::isnan(expected)) {
        EXPECT_TRUE(std::isnan(wide[i]) && std::signbit(wide[i]) == std::signbit(expected))
            << "half 0x" << std::hex << halves[i] << " -> " << wide[i];
      } else {
        EXPECT_EQ(std::bit_cast<std::uint32_t>(wide[i]), std::bit_cast<std::uint32_t>(expected))
            << "half 0x" << std::hex << halves[i] << " -> " << wide[i];
      }
    }
  });
}

TEST(SupportElements, StoreFromFloatRoundsToTheElementType) {
  std::uint16_t half = 0;
  support::StoreFromFloat(&half, DType::kF16, 0, 1.0f / 3);
  EXPECT_EQ(half, F16FromF32(1.0f / 3));
  support::StoreFromFloat(&half, DType::kBF16, 0, 1.0f / 3);
  EXPECT_EQ(half, BF16FromF32(1.0f / 3));
  float single = 0;
  support::StoreFromFloat(&single, DType::kF32, 0, 1.0f / 3);
  EXPECT_EQ(single, 1.0f / 3);
}

// A slice of rows is the oracle's answer for those rows: here against the library's whole-problem oracle
// (Algorithm::kOracle, rounded to float32), on a causal GQA problem with Nq != Nk and an odd head dim.
TEST(SupportOracle, RowsAgreeWithTheWholeProblemOracle) {
  testing::Problem problem({.batch = 2, .Nq = 13, .Nk = 29, .Hq = 4, .Hkv = 2, .d = 40, .dv = 59},
                           {.causal = true}, /*seed=*/5);
  const AttentionParams& p = problem.params();
  forward(p, Algorithm::kOracle);
  for (std::int64_t b = 0; b < 2; ++b) {
    for (std::int64_t h = 0; h < 4; ++h) {
      const support::OracleRows rows = support::OracleHeadRows(p, b, h, 3, 11);
      ASSERT_EQ(rows.o.size(), 8u * 59);
      ASSERT_EQ(rows.lse.size(), 8u);
      for (std::int64_t r = 0; r < 8; ++r) {
        EXPECT_EQ(static_cast<float>(rows.lse[r]), problem.Lse(b, h, 3 + r)) << b << " " << h << " " << r;
        for (std::int64_t c = 0; c < 59; ++c)
          EXPECT_EQ(static_cast<float>(rows.o[r * 59 + c]), problem.O(b, 3 + r, h, c)) << b << h << r << c;
      }
    }
  }
}

}  // namespace
}  // namespace flashattn
