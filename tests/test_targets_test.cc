// The tests' choice of SIMD targets (test_targets.h): every target this CPU runs unless the environment names
// some to skip; a name that is not among them, or skipping all of them, is an error.
#include "test_targets.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "simd/targets.h"

namespace flashattn::testing {
namespace {

constexpr const char* kSkip = "FLASHATTN_TEST_SKIP_TARGETS";

// Sets the variable for one test and restores what the process had.
class SkipTargets {
 public:
  explicit SkipTargets(const std::string& value) {
    if (const char* before = std::getenv(kSkip)) before_ = before, had_ = true;
    setenv(kSkip, value.c_str(), 1);
  }
  ~SkipTargets() { had_ ? setenv(kSkip, before_.c_str(), 1) : unsetenv(kSkip); }

 private:
  std::string before_;
  bool had_ = false;
};

TEST(TargetsUnderTest, EveryTargetWhenNoneIsNamed) {
  const SkipTargets none("");
  EXPECT_EQ(TargetsUnderTest(), simd::CompiledTargets());
}

TEST(TargetsUnderTest, LeavesOutTheNamedOnesOnly) {
  const std::vector<std::int64_t> compiled = simd::CompiledTargets();
  ASSERT_GE(compiled.size(), 2u);  // every build has a SIMD target and the scalar baseline
  const SkipTargets first(" " + simd::TargetName(compiled.front()) + ",");
  EXPECT_EQ(TargetsUnderTest(), std::vector<std::int64_t>(compiled.begin() + 1, compiled.end()));
}

TEST(TargetsUnderTest, AnUnknownNameIsAnError) {
  const SkipTargets typo("NEON_OR_AVX9");
  EXPECT_THROW(TargetsUnderTest(), std::invalid_argument);
}

TEST(TargetsUnderTest, SkippingEveryTargetIsAnError) {
  std::string all;
  for (const std::int64_t target : simd::CompiledTargets()) all += simd::TargetName(target) + " ";
  const SkipTargets every(all);
  EXPECT_THROW(TargetsUnderTest(), std::invalid_argument);
}

}  // namespace
}  // namespace flashattn::testing
