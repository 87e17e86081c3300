// Concurrent callers: eight std::threads calling forward() (fused, several shapes and element
// types) and decode() (contiguous and paged, with appended keys and rotary) at once on independent buffers,
// and forward/decode/backward called from inside an OpenMP parallel region, give results bitwise equal to the
// same calls made one after another — with num_threads 1 and with 0 (all cores).
#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cstdint>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backward_test_problem.h"
#include "decode_test_case.h"
#include "flashattn/backward.h"
#include "flashattn/decode.h"
#include "test_problem.h"

namespace flashattn::testing {
namespace {

// A fixed set of independent calls; two Jobs built with the same num_threads hold identical inputs.
class Jobs {
 public:
  Jobs(int num_threads, bool with_backward) {
    const std::pair<Shape, Modifiers> forward_cases[] = {
        {{.batch = 2, .Nq = 97, .Nk = 113, .Hq = 4, .Hkv = 2, .d = 40, .dv = 40}, {.causal = true}},
        {{.Nq = 200, .Nk = 300, .Hq = 2, .Hkv = 1, .d = 64, .dv = 64, .dtype = DType::kF16},
         {.window_left = 40, .window_right = 8}},
        {{.Nq = 65,
          .Nk = 65,
          .Hq = 3,
          .Hkv = 3,
          .d = 128,
          .dv = 96,
          .dtype = DType::kBF16,
          .head_major = true},
         {.softcap = 5.0f, .alibi = true}},
        {{.batch = 2, .Nq = 1, .Nk = 513, .Hq = 8, .Hkv = 2, .d = 64, .dv = 64}, {.mask = MaskKind::kBool}},
        {{.Nq = 128, .Nk = 128, .Hq = 2, .Hkv = 2, .d = 32, .dv = 32},
         {.causal = true, .mask = MaskKind::kAdditive}},
        {{.Nq = 33, .Nk = 700, .Hq = 4, .Hkv = 1, .d = 80, .dv = 80, .dtype = DType::kF16}, {.causal = true}},
    };
    std::uint64_t seed = 1;
    for (const auto& [shape, mods] : forward_cases) {
      forward_.push_back(std::make_unique<Problem>(shape, mods, seed++));
      forward_.back()->params().num_threads = num_threads;
    }
    decode_.push_back(std::make_unique<DecodeCase>(
        DecodeShape{.Nq = 1, .Hq = 8, .Hkv = 2, .d = 64, .Nmax = 600, .cached = {500, 300}}, DecodeMods{},
        seed++));
    decode_.push_back(std::make_unique<DecodeCase>(DecodeShape{.Nq = 2,
                                                               .Nnew = 3,
                                                               .Hq = 4,
                                                               .Hkv = 4,
                                                               .d = 32,
                                                               .Nmax = 256,
                                                               .cached = {100, 200, 37},
                                                               .dtype = DType::kF16,
                                                               .page_size = 16},
                                                   DecodeMods{.causal = true, .rotary_dim = 16}, seed++));
    for (auto& c : decode_) c->params().num_threads = num_threads;
    if (!with_backward) return;
    backward_.push_back(std::make_unique<BackwardProblem>(
        Shape{.batch = 2, .Nq = 37, .Nk = 53, .Hq = 4, .Hkv = 2, .d = 24, .dv = 20},
        Modifiers{.causal = true}, seed++));
    backward_.push_back(std::make_unique<BackwardProblem>(
        Shape{.Nq = 64, .Nk = 64, .Hq = 2, .Hkv = 1, .d = 64, .dv = 64, .dtype = DType::kF16},
        Modifiers{.softcap = 4.0f}, seed++, Dropout{.p = 0.2f, .seed = 9}));
    for (auto& b : backward_) b->params().attention.num_threads = num_threads;
  }

  std::size_t size() const { return forward_.size() + decode_.size() + backward_.size(); }

  void Run(std::size_t n) {
    if (n < forward_.size()) return forward(forward_[n]->params());
    n -= forward_.size();
    if (n < decode_.size()) return decode(decode_[n]->params());
    backward(backward_[n - decode_.size()]->params());
  }

  // Every output bit of job n: O and LSE; for decode also both caches (keys are appended); the gradients.
  std::vector<std::uint32_t> Result(std::size_t n) const {
    std::vector<std::uint32_t> bits;
    if (n < forward_.size()) {
      const Problem& x = *forward_[n];
      const Shape& s = x.shape();
      for (std::int64_t b = 0; b < s.batch; ++b)
        for (std::int64_t h = 0; h < s.Hq; ++h)
          for (std::int64_t i = 0; i < s.Nq; ++i) {
            for (std::int64_t c = 0; c < s.dv; ++c)
              bits.push_back(std::bit_cast<std::uint32_t>(x.O(b, i, h, c)));
            bits.push_back(std::bit_cast<std::uint32_t>(x.Lse(b, h, i)));
          }
      return bits;
    }
    n -= forward_.size();
    if (n < decode_.size()) {
      const DecodeCase& c = *decode_[n];
      const DecodeShape& s = c.shape();
      for (std::int64_t b = 0; b < c.batch(); ++b)
        for (std::int64_t h = 0; h < s.Hq; ++h)
          for (std::int64_t i = 0; i < s.Nq; ++i) {
            for (std::int64_t e = 0; e < s.d; ++e)
              bits.push_back(std::bit_cast<std::uint32_t>(c.O(b, i, h, e)));
            bits.push_back(std::bit_cast<std::uint32_t>(c.Lse(b, h, i)));
          }
      for (std::uint16_t x : c.CacheSnapshot()) bits.push_back(x);
      return bits;
    }
    for (std::uint16_t x : backward_[n - decode_.size()]->GradientBits()) bits.push_back(x);
    return bits;
  }

 private:
  std::vector<std::unique_ptr<Problem>> forward_;
  std::vector<std::unique_ptr<DecodeCase>> decode_;
  std::vector<std::unique_ptr<BackwardProblem>> backward_;
};

// The results of every job run one after another, on this thread.
std::vector<std::vector<std::uint32_t>> SerialResults(int num_threads, bool with_backward) {
  Jobs jobs(num_threads, with_backward);
  std::vector<std::vector<std::uint32_t>> results;
  for (std::size_t n = 0; n < jobs.size(); ++n) {
    jobs.Run(n);
    results.push_back(jobs.Result(n));
  }
  return results;
}

void ExpectSameResults(const Jobs& jobs, const std::vector<std::vector<std::uint32_t>>& serial) {
  ASSERT_EQ(jobs.size(), serial.size());
  for (std::size_t n = 0; n < jobs.size(); ++n) {
    const std::vector<std::uint32_t> result = jobs.Result(n);
    ASSERT_EQ(result.size(), serial[n].size()) << "job " << n;
    std::size_t differing = 0;
    for (std::size_t k = 0; k < result.size(); ++k) differing += result[k] != serial[n][k];
    EXPECT_EQ(differing, 0u) << "job " << n << ": " << differing << " of " << result.size()
                             << " words differ";
  }
}

class ConcurrencyTest : public ::testing::TestWithParam<int> {};

TEST_P(ConcurrencyTest, EightThreadsCallingForwardAndDecodeAtOnceMatchSerialCalls) {
  const int num_threads = GetParam();
  const auto serial = SerialResults(num_threads, false);
  for (int round = 0; round < 2; ++round) {
    Jobs jobs(num_threads, false);
    ASSERT_EQ(jobs.size(), 8u);
    std::latch start(static_cast<std::ptrdiff_t>(jobs.size()));
    std::vector<std::thread> threads;
    for (std::size_t n = 0; n < jobs.size(); ++n) {
      threads.emplace_back([&jobs, &start, n] {
        start.arrive_and_wait();  // all eight calls begin together
        jobs.Run(n);
      });
    }
    for (std::thread& thread : threads) thread.join();
    ExpectSameResults(jobs, serial);
  }
}

TEST_P(ConcurrencyTest, CallsFromInsideAnOpenMpParallelRegionMatchSerialCalls) {
  const int num_threads = GetParam();
  const auto serial = SerialResults(num_threads, true);
  Jobs jobs(num_threads, true);
  const auto count = static_cast<std::int64_t>(jobs.size());
  int team = 0;
#pragma omp parallel num_threads(4)
  {
#pragma omp single
    team = omp_get_num_threads();
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t n = 0; n < count; ++n) jobs.Run(static_cast<std::size_t>(n));
  }
  EXPECT_EQ(team, 4);
  ExpectSameResults(jobs, serial);
}

INSTANTIATE_TEST_SUITE_P(NumThreads, ConcurrencyTest, ::testing::Values(1, 0),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == 0 ? std::string("AllCores") : std::string("OneThread");
                         });

}  // namespace
}  // namespace flashattn::testing
