// The working memory calling threads keep between calls (include/flashattn/working_memory.h): a call's memory
// is kept by its thread up to the limit, a limit of 0 keeps none, and with 64 calling threads alive the limit
// bounds their total and release frees it, whichever thread sets or releases.
#include <gtest/gtest.h>

#include <barrier>
#include <cstddef>
#include <memory>
#include <thread>
#include <vector>

#include "flashattn/c_api.h"
#include "flashattn/flashattn.h"
#include "test_problem.h"

namespace flashattn::testing {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// A forward call on one thread, the fused kernel: it takes working memory (packed K and V, the tiles).
void CallForward(std::uint64_t seed) {
  Problem problem({.Nq = 64, .Nk = 96, .Hq = 2, .Hkv = 1, .d = 32, .dv = 32}, {}, seed);
  problem.params().num_threads = 1;
  forward(problem.params());
}

// Every test leaves the default limit and nothing kept.
class WorkingMemory : public ::testing::Test {
 protected:
  void TearDown() override {
    set_working_memory_limit(kDefaultWorkingMemoryLimit);
    release_working_memory();
  }
};

TEST_F(WorkingMemory, ACallsMemoryIsKeptUpToTheLimit) {
  EXPECT_EQ(working_memory_limit(), kDefaultWorkingMemoryLimit);
  release_working_memory();
  EXPECT_EQ(retained_working_memory(), 0u);
  CallForward(1);
  const std::size_t kept = retained_working_memory();
  EXPECT_GT(kept, 0u);
  EXPECT_LE(kept, kDefaultWorkingMemoryLimit);
  CallForward(2);  // takes the kept blocks again
  EXPECT_EQ(retained_working_memory(), kept);

  set_working_memory_limit(kept - 1);  // trims at once
  EXPECT_LT(retained_working_memory(), kept);
  release_working_memory();
  EXPECT_EQ(retained_working_memory(), 0u);
  EXPECT_EQ(working_memory_limit(), kept - 1);  // the limit stays
}

TEST_F(WorkingMemory, ALimitOfZeroKeepsNothing) {
  set_working_memory_limit(0);
  CallForward(3);
  EXPECT_EQ(retained_working_memory(), 0u);
}

TEST_F(WorkingMemory, TheCApiSetsTheSameLimit) {
  flashattn_set_working_memory_limit(3 * kMiB);
  EXPECT_EQ(working_memory_limit(), 3 * kMiB);
  EXPECT_EQ(flashattn_working_memory_limit(), 3 * kMiB);
  CallForward(4);
  EXPECT_EQ(flashattn_retained_working_memory(), retained_working_memory());
  flashattn_release_working_memory();
  EXPECT_EQ(retained_working_memory(), 0u);
}

// 64 threads each make a call and stay alive: the limit bounds what they keep in total, lowering it trims
// them all, and a release by this thread frees their memory.
TEST_F(WorkingMemory, SixtyFourCallingThreadsAreBoundedAndReleased) {
  constexpr int kThreads = 64;
  release_working_memory();
  CallForward(5);
  const std::size_t per_call = retained_working_memory();
  release_working_memory();
  const std::size_t limit = per_call;  // room for one call's memory per thread
  set_working_memory_limit(limit);
  std::barrier called(kThreads + 1), checked(kThreads + 1);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      CallForward(100 + t);
      called.arrive_and_wait();
      checked.arrive_and_wait();  // alive, keeping its memory, until the checks are done
    });
  }
  called.arrive_and_wait();
  EXPECT_EQ(retained_working_memory(), kThreads * per_call);
  EXPECT_LE(retained_working_memory(), kThreads * limit);
  set_working_memory_limit(limit / 2);  // trims the other threads' memory too
  EXPECT_LE(retained_working_memory(), kThreads * (limit / 2));
  set_working_memory_limit(limit);
  release_working_memory();
  EXPECT_EQ(retained_working_memory(), 0u);
  checked.arrive_and_wait();
  for (std::thread& thread : threads) thread.join();
}

}  // namespace
}  // namespace flashattn::testing
