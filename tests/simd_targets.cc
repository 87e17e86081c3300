// simd_targets [--require NAME]...: prints the SIMD targets compiled into the library that this CPU runs and
// the one a call dispatches to, and fails unless the dispatched target is among them and every required
// target (by Highway's name: NEON, SVE, SVE2, SVE_256, ...) is too. scripts/arm.sh runs it under each
// emulated Arm CPU, so that every run of the tests there is known to cover the targets it is meant to.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "simd/targets.h"

int main(int argc, char** argv) {
  std::vector<std::string> required;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg != "--require" || i + 1 == argc) {
      std::fprintf(stderr, "usage: simd_targets [--require NAME]...\n");
      return 2;
    }
    required.push_back(argv[++i]);
  }

  std::vector<std::string> names;
  for (const std::int64_t target : flashattn::simd::CompiledTargets()) {
    names.push_back(flashattn::simd::TargetName(target));
  }
  const std::string dispatched = flashattn::simd::TargetName(flashattn::simd::DispatchedTarget());
  std::printf("compiled and supported:");
  for (const std::string& name : names) std::printf(" %s", name.c_str());
  std::printf("\ndispatched: %s\n", dispatched.c_str());

  int status = 0;
  const auto check = [&](const std::string& name, const char* what) {
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      std::fprintf(stderr, "simd_targets: %s target %s is not among those this CPU runs\n", what, name.c_str());
      status = 1;
    }
  };
  check(dispatched, "the dispatched");
  for (const std::string& name : required) check(name, "the required");
  return status;
}
