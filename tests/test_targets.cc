#include "test_targets.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>

#include "simd/targets.h"

namespace flashattn::testing {

std::vector<std::int64_t> TargetsUnderTest() { return TargetsUnderTest(simd::CompiledTargets()); }

std::vector<std::int64_t> TargetsUnderTest(const std::vector<std::int64_t>& compiled) {
  const char* skip = std::getenv("FLASHATTN_TEST_SKIP_TARGETS");
  std::string names = skip != nullptr ? skip : "";
  std::replace(names.begin(), names.end(), ',', ' ');
  std::istringstream words(names);
  std::vector<std::int64_t> kept = compiled;
  std::string available;
  for (const std::int64_t target : compiled) available += " " + simd::TargetName(target);
  for (std::string name; words >> name;) {
    const auto named = std::find_if(compiled.begin(), compiled.end(),
                                    [&](std::int64_t target) { return simd::TargetName(target) == name; });
    if (named == compiled.end()) {
      throw std::invalid_argument("FLASHATTN_TEST_SKIP_TARGETS names " + name +
                                  ", which is not among the targets this CPU runs:" + available);
    }
    kept.erase(std::remove(kept.begin(), kept.end(), *named), kept.end());
  }
  if (kept.empty()) {
    throw std::invalid_argument("FLASHATTN_TEST_SKIP_TARGETS='" + std::string(skip != nullptr ? skip : "") +
                                "' skips every target this CPU runs:" + available);
  }
  return kept;
}

}  // namespace flashattn::testing
