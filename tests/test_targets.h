// The SIMD targets the tests run each kernel on.
#ifndef FLASHATTN_TESTS_TEST_TARGETS_H_
#define FLASHATTN_TESTS_TEST_TARGETS_H_

#include <cstdint>
#include <vector>

namespace flashattn::testing {

// `compiled` (by default every target compiled into the library that this CPU runs) less the targets named in
// the environment variable FLASHATTN_TEST_SKIP_TARGETS (Highway's names, separated by spaces or commas).
// scripts/arm.sh names NEON and SCALAR on its SVE CPUs: their NEON-only CPU runs both, and neither depends on
// the vector length. Throws, failing the test, for a name that is not among `compiled` or a list that leaves
// no target, so that a misspelt name cannot quietly skip a target or a whole test.
std::vector<std::int64_t> TargetsUnderTest();
std::vector<std::int64_t> TargetsUnderTest(const std::vector<std::int64_t>& compiled);

}  // namespace flashattn::testing

#endif  // FLASHATTN_TESTS_TEST_TARGETS_H_
