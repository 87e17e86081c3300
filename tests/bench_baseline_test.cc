// The OpenBLAS baseline of `flashattn bench` computes the same attention as the float64 oracle, in both
// threading arrangements, for everything the benchmark varies: shapes with tails, Nq ≠ Nk under the causal
// mask (including rows that see no key), grouped-query heads, both layouts and the three element types.
#include <gtest/gtest.h>

#include "bench/baseline.h"
#include "bench/blas_core.h"
#include "test_problem.h"

namespace flashattn::bench {
namespace {

using testing::CompareWithOracle;
using testing::Modifiers;
using testing::Problem;
using testing::Shape;

// The outputs are rounded once to the element type; the baseline's float32 arithmetic adds far less.
double Tolerance(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 2e-5;
    case DType::kF16: return 2e-3;
    case DType::kBF16: return 1.6e-2;
  }
  return 0;
}

struct Case {
  Shape shape;
  bool causal;
};

class BaselineVsOracle : public ::testing::TestWithParam<BaselineArrangement> {};

TEST_P(BaselineVsOracle, AgreesOnEveryShapeTheBenchmarkVaries) {
  const Case cases[] = {
      {{.batch = 1, .Nq = 64, .Nk = 64, .Hq = 2, .Hkv = 2, .d = 32, .dv = 32}, false},
      {{.batch = 2, .Nq = 37, .Nk = 53, .Hq = 3, .Hkv = 3, .d = 19, .dv = 19}, true},
      {{.batch = 1, .Nq = 53, .Nk = 37, .Hq = 2, .Hkv = 1, .d = 24, .dv = 24}, true},  // 16 rows see no key
      {{.batch = 2, .Nq = 33, .Nk = 33, .Hq = 4, .Hkv = 2, .d = 40, .dv = 40, .head_major = true}, true},
      {{.batch = 1, .Nq = 1, .Nk = 129, .Hq = 4, .Hkv = 1, .d = 128, .dv = 128}, false},
  };
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (const Case& c : cases) {
      Shape shape = c.shape;
      shape.dtype = dtype;
      Modifiers modifiers;
      modifiers.causal = c.causal;
      Problem problem(shape, modifiers, /*seed=*/7);
      problem.params().num_threads = 2;
      BlasBaseline baseline(problem.params(), GetParam());
      baseline.Run();
      const testing::Errors errors = CompareWithOracle(problem);
      const std::string what = shape.ToString() + " " + modifiers.ToString();
      EXPECT_LE(errors.o_error, Tolerance(dtype)) << what;
      EXPECT_LE(errors.lse_error, 1e-5) << what;

      problem.ResetOutputs();  // a second call on the same scratch gives the same answer
      baseline.Run();
      EXPECT_LE(CompareWithOracle(problem).o_error, Tolerance(dtype)) << what << " (second run)";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Arrangements, BaselineVsOracle,
                         ::testing::Values(BaselineArrangement::kHeadsParallel, BaselineArrangement::kThreadedBlas),
                         [](const auto& info) {
                           return info.param == BaselineArrangement::kHeadsParallel ? "HeadsParallel"
                                                                                    : "ThreadedBlas";
                         });

TEST(BlasBaseline, RejectsWhatItDoesNotImplement) {
  Modifiers softcap;
  softcap.softcap = 30.0f;
  Problem problem({.Nq = 4, .Nk = 4, .d = 8, .dv = 8}, softcap, 1);
  problem.params().num_threads = 1;
  EXPECT_THROW(BlasBaseline(problem.params(), BaselineArrangement::kHeadsParallel), Error);

  Problem unresolved({.Nq = 4, .Nk = 4, .d = 8, .dv = 8}, Modifiers{}, 1);
  unresolved.params().num_threads = 0;
  EXPECT_THROW(BlasBaseline(unresolved.params(), BaselineArrangement::kThreadedBlas), Error);
}

TEST(BlasBaseline, ScratchIsTheScoresPerWorker) {
  AttentionParams p;
  p.batch = 1;
  p.heads_q = p.heads_kv = 8;
  p.seqlen_q = p.seqlen_k = 4096;
  p.head_dim = 128;
  p.num_threads = 2;
  const std::int64_t scores = std::int64_t{4096} * 4096 * 4;  // 64 MiB
  EXPECT_EQ(BlasBaseline::ScratchBytes(p, BaselineArrangement::kThreadedBlas), scores);
  EXPECT_EQ(BlasBaseline::ScratchBytes(p, BaselineArrangement::kHeadsParallel), 2 * scores);
  p.heads_q = p.heads_kv = 1;  // one head: one worker whatever the thread count
  EXPECT_EQ(BlasBaseline::ScratchBytes(p, BaselineArrangement::kHeadsParallel), scores);
}

TEST(BlasCore, AGenericFamilyIsReplacedByTheBestOneTheCpuRuns) {
  EXPECT_EQ(BetterBlasCore("Prescott", true, true), "SkylakeX");
  EXPECT_EQ(BetterBlasCore("Prescott", false, true), "Haswell");
  EXPECT_EQ(BetterBlasCore("Sandybridge", false, true), "Haswell");
  EXPECT_EQ(BetterBlasCore("Prescott", false, false), std::nullopt);  // no AVX2: nothing better exists
  EXPECT_EQ(BetterBlasCore("SkylakeX", true, true), std::nullopt);    // OpenBLAS's own choice stands
  EXPECT_EQ(BetterBlasCore("Haswell", true, true), std::nullopt);
  EXPECT_EQ(BetterBlasCore("Zen", false, true), std::nullopt);
  EXPECT_FALSE(BlasCore().empty());
}

}  // namespace
}  // namespace flashattn::bench
