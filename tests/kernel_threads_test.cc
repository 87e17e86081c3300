// Threads and the fused kernel: every row is computed by one thread in a fixed order, so results are
// bitwise identical for any thread count, on repeated calls, and when several callers run at once; and the
// thread count in the params is the number of threads a call runs on.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "test_problem.h"

namespace flashattn::testing {
namespace {

// The output and LSE of one fused run as raw values (NaN-safe bitwise comparison via memcmp).
std::vector<float> RunFused(Problem& problem, int threads) {
  problem.ResetOutputs();
  problem.params().num_threads = threads;
  forward(problem.params(), Algorithm::kFused);
  return OutputValues(problem);
}

const Shape kShape{.batch = 2, .Nq = 300, .Nk = 517, .Hq = 4, .Hkv = 2, .d = 64, .dv = 48};
const Modifiers kModifiers{.causal = true, .alibi = true};

TEST(FusedThreadsTest, OneTwoAndFourThreadsGiveIdenticalBits) {
  Problem problem(kShape, kModifiers, 21);
  const std::vector<float> one = RunFused(problem, 1);
  EXPECT_LE(CompareWithOracle(problem).o_error, 1e-5);
  EXPECT_TRUE(BitwiseEqual(one, RunFused(problem, 2)));
  EXPECT_TRUE(BitwiseEqual(one, RunFused(problem, 4)));
  EXPECT_TRUE(BitwiseEqual(one, RunFused(problem, 0)));
}

TEST(FusedThreadsTest, RepeatedCallsWithSameThreadCountAreBitwiseEqual) {
  Problem problem(kShape, {.window_left = 40, .window_right = 3, .softcap = 4.0f}, 22);
  const std::vector<float> first = RunFused(problem, 2);
  for (int repeat = 0; repeat < 3; ++repeat) EXPECT_TRUE(BitwiseEqual(first, RunFused(problem, 2))) << repeat;
}

TEST(FusedThreadsTest, ConcurrentCallersMatchSerialResults) {
  constexpr int kCallers = 4;
  std::vector<std::unique_ptr<Problem>> problems;
  std::vector<std::vector<float>> serial;
  for (int k = 0; k < kCallers; ++k) {
    Shape shape = kShape;
    shape.dtype = k % 2 == 0 ? DType::kF32 : DType::kF16;
    problems.push_back(std::make_unique<Problem>(shape, kModifiers, 30 + k));
    serial.push_back(RunFused(*problems.back(), 2));
  }
  std::vector<std::vector<float>> concurrent(kCallers);
  std::vector<std::thread> callers;
  for (int k = 0; k < kCallers; ++k) {
    callers.emplace_back([&, k] { concurrent[k] = RunFused(*problems[k], 2); });
  }
  for (std::thread& caller : callers) caller.join();
  for (int k = 0; k < kCallers; ++k) EXPECT_TRUE(BitwiseEqual(serial[k], concurrent[k])) << "caller " << k;
}

// The threads of this process, as the kernel lists them.
int OsThreads() {
  int count = 0;
  for ([[maybe_unused]] const auto& task : std::filesystem::directory_iterator("/proc/self/task")) ++count;
  return count;
}

// In a fresh process (the death-test child re-runs this test alone), the first forward call with
// num_threads = n starts the OpenMP team: the process gains n − 1 threads. The child exits with that
// number plus one, the size of the team it ran on.
void ExitWithTeamSizeOfFirstCall(int threads) {
  // A first thread of our own starts whatever helper thread a runtime starts with the first thread of a
  // process (ThreadSanitizer's background thread), so that only the OpenMP team is counted below.
  std::thread([] {}).join();
  const int before = OsThreads();
  Problem problem(kShape, kModifiers, 40);
  RunFused(problem, threads);
  std::exit(OsThreads() - before + 1);
}

TEST(FusedThreadsTest, ParamsThreadCountIsTheTeamSize) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(ExitWithTeamSizeOfFirstCall(1), ::testing::ExitedWithCode(1), "");
  EXPECT_EXIT(ExitWithTeamSizeOfFirstCall(3), ::testing::ExitedWithCode(3), "");
}

}  // namespace
}  // namespace flashattn::testing
