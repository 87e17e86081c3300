// The SIMD targets compiled into the library, for tests and measurements: which of them this CPU runs, their
// names, a restriction of every kernel's dispatch to one of them (in the spirit of Highway's test-all-targets
// mode), and the vector exp on the dispatched target. Every kernel dispatches through Highway's one chosen
// target (dispatch.h), so a restriction applies to forward, decode and backward alike.
#ifndef FLASHATTN_SIMD_TARGETS_H_
#define FLASHATTN_SIMD_TARGETS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace flashattn::simd {

// The targets compiled into the library that this CPU can run, as Highway target bits (call it before
// restricting: a restriction narrows it).
std::vector<std::int64_t> CompiledTargets();
// The name of one ("AVX2", "SSE4", ...).
std::string TargetName(std::int64_t target);
// Restricts every dispatch to `target` (0 restores the normal choice): a process-wide setting meant for
// tests.
void RestrictTargetForTest(std::int64_t target);
// The target the next call would run on.
std::int64_t DispatchedTarget();

// y_i = e^{x_i} with the kernels' vector exp on the dispatched target (for the accuracy test), and the same
// with the softmax's ExpOfNonPositive, which skips the overflow test (valid for x ≤ 88.37).
void VectorExp(const float* x, float* y, std::size_t n);
void VectorExpOfNonPositive(const float* x, float* y, std::size_t n);

}  // namespace flashattn::simd

#endif  // FLASHATTN_SIMD_TARGETS_H_
