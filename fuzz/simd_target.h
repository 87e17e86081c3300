// The SIMD target a fuzzed call runs on: Highway's dispatch (choice 0, what an exhausted input reads), or
// one of the compiled targets this CPU runs, EMU128 included, for every kernel the call dispatches to.
// The fuzz targets read this choice after all others, so that inputs saved before it existed (the corpus,
// the regressions) still decode to the same call, on the dispatched target.
#ifndef FLASHATTN_FUZZ_SIMD_TARGET_H_
#define FLASHATTN_FUZZ_SIMD_TARGET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_input.h"
#include "simd/targets.h"

namespace flashattn::fuzz {

class ScopedSimdTarget {
 public:
  explicit ScopedSimdTarget(FuzzInput& in) {
    const std::vector<std::int64_t> targets = simd::CompiledTargets();
    const std::int64_t choice = in.Range(0, static_cast<std::int64_t>(targets.size()));
    target_ = choice == 0 ? 0 : targets[choice - 1];
    simd::RestrictTargetForTest(target_);  // 0: back to Highway's own choice
  }
  ~ScopedSimdTarget() { simd::RestrictTargetForTest(0); }
  ScopedSimdTarget(const ScopedSimdTarget&) = delete;
  ScopedSimdTarget& operator=(const ScopedSimdTarget&) = delete;

  std::string Name() const { return target_ == 0 ? "dispatched" : simd::TargetName(target_); }

 private:
  std::int64_t target_ = 0;
};

}  // namespace flashattn::fuzz

#endif  // FLASHATTN_FUZZ_SIMD_TARGET_H_
