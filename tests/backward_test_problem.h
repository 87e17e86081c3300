// Backward problems for the tests: a forward Problem (test_problem.h) plus the incoming gradient dO and the
// gradients dQ, dK, dV in the same element type and layout, and the gradients' errors against the oracle.
#ifndef FLASHATTN_TESTS_BACKWARD_TEST_PROBLEM_H_
#define FLASHATTN_TESTS_BACKWARD_TEST_PROBLEM_H_

#include <cstdint>
#include <vector>

#include "flashattn/backward.h"
#include "test_problem.h"

namespace flashattn::testing {

struct Dropout {
  float p = 0.0f;
  std::uint64_t seed = 0, offset = 0;
};

class BackwardProblem {
 public:
  // Inputs and dO drawn from N(0, 1); O and LSE filled by forward(`forward_algorithm`); gradients NaN.
  BackwardProblem(const Shape& shape, const Modifiers& modifiers, std::uint64_t seed, Dropout dropout = {},
                  Algorithm forward_algorithm = Algorithm::kFused);
  BackwardProblem(const BackwardProblem&) = delete;
  BackwardProblem& operator=(const BackwardProblem&) = delete;

  Problem& forward() { return forward_; }
  const Problem& forward() const { return forward_; }
  // Runs forward(`algorithm`) again on forward().params() (after a test changed them, e.g. the mask) and
  // gives params().attention the changed parameters, O and LSE.
  void RecomputeForward(Algorithm algorithm = Algorithm::kFused);
  BackwardParams& params() { return params_; }
  const BackwardParams& params() const { return params_; }
  const Shape& shape() const { return forward_.shape(); }

  // Gradient elements as float: dQ (b, i, h, c) with a query head h, dK/dV (b, j, h, c) with a K/V head h.
  float dQ(std::int64_t b, std::int64_t i, std::int64_t h, std::int64_t c) const;
  float dK(std::int64_t b, std::int64_t j, std::int64_t h, std::int64_t c) const;
  float dV(std::int64_t b, std::int64_t j, std::int64_t h, std::int64_t c) const;
  void SetDO(std::int64_t b, std::int64_t i, std::int64_t h, std::int64_t c, float value);
  void ResetGradients();
  // The raw bytes of dQ, dK, dV, for bitwise comparisons.
  std::vector<std::uint16_t> GradientBits() const;

 private:
  Problem forward_;
  BackwardParams params_;
  std::vector<std::uint16_t> do_, dq_, dk_, dv_;
};

// max |g − g_ref| / max |g_ref| per gradient against the float64 oracle (absolute when g_ref is all zero;
// infinite if any element is NaN).
struct GradientErrors {
  double dq = 0.0, dk = 0.0, dv = 0.0;
};
GradientErrors CompareGradientsWithOracle(const BackwardProblem& problem);

}  // namespace flashattn::testing

#endif  // FLASHATTN_TESTS_BACKWARD_TEST_PROBLEM_H_
