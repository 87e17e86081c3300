// lightning_indexer() (include/flashattn/indexer.h) against the float64 reference on every compiled target:
// every key element type, contiguous and paged caches, causal and not, prefill rows, top_k beyond the keys a
// row sees, ties, NaN ranking, and the same result on any thread count.
#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "flashattn/indexer.h"
#include "indexer/indexer.h"
#include "indexer_test_case.h"
#include "reference/reference.h"
#include "simd/targets.h"
#include "test_targets.h"

namespace flashattn::testing {
namespace {

using Outputs = std::pair<std::vector<std::int32_t>, std::vector<float>>;

Outputs Reference(IndexerCase& c) {
  return c.RunInto([](const IndexerParams& p) { reference::LightningIndexer(p); });
}
Outputs Kernel(IndexerCase& c, int threads = 0) {
  return c.RunInto([&](IndexerParams p) {
    p.num_threads = threads;
    lightning_indexer(p);
  });
}

// Equal scores, a NaN equal to a NaN.
bool SameScores(const std::vector<float>& a, const std::vector<float>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](float x, float y) { return x == y || (std::isnan(x) && std::isnan(y)); });
}

// Exact agreement (integer inputs: every score is exact in float32), on every target.
void ExpectExact(IndexerCase& c) {
  const Outputs expected = Reference(c);
  for (const std::int64_t target : TargetsUnderTest()) {
    simd::RestrictTargetForTest(target);
    const Outputs got = Kernel(c);
    EXPECT_EQ(got.first, expected.first) << c.shape().ToString() << " on " << simd::TargetName(target);
    EXPECT_TRUE(SameScores(got.second, expected.second)) << c.shape().ToString() << " on " << simd::TargetName(target);
  }
  simd::RestrictTargetForTest(0);
}

TEST(Indexer, EveryKeyElementTypeAndLayoutExactly) {
  const std::vector<std::pair<CacheElement, DType>> caches = {
      {CacheElement::kFloat, DType::kF32},  {CacheElement::kFloat, DType::kF16}, {CacheElement::kFloat, DType::kBF16},
      {CacheElement::kInt8, DType::kF32},   {CacheElement::kFp8E4M3, DType::kF32},
      {CacheElement::kFp8E5M2, DType::kF32}};
  const DType q_types[] = {DType::kF32, DType::kF16, DType::kBF16};
  int n = 0;
  for (const auto& [element, cache_dtype] : caches)
    for (const std::int64_t page_size : {0, 1, 16, 256}) {
      IndexerShape shape{.keys = {97, 1025, 0}, .Nq = 2, .heads = 4, .d = 40, .top_k = 33,
                         .dtype = q_types[n++ % 3], .element = element, .cache_dtype = cache_dtype,
                         .page_size = page_size};
      IndexerCase c(shape, 10 + n);
      ExpectExact(c);
    }
}

TEST(Indexer, HeadCountsAndHeadDimensions) {
  for (const std::int64_t heads : {1, 4, 64})
    for (const std::int64_t d : {128, 59, 1}) {
      IndexerCase c({.keys = {113, 1}, .Nq = 1, .heads = heads, .d = d, .top_k = 20, .dtype = DType::kBF16,
                     .cache_dtype = DType::kBF16}, 3 * heads + d);
      ExpectExact(c);
    }
}

TEST(Indexer, TopKOfOneAndBeyondTheVisibleKeys) {
  for (const std::int64_t top_k : {1, 2, 96, 97, 98, 500}) {
    IndexerCase c({.keys = {97, 5, 0}, .Nq = 1, .heads = 4, .d = 128, .top_k = top_k}, top_k);
    ExpectExact(c);
    const Outputs got = Kernel(c);
    for (std::int64_t slot = 0; slot < top_k; ++slot) {  // sequence 1 sees 5 keys, sequence 2 none
      EXPECT_EQ(got.first[top_k + slot] < 0, slot >= 5);
      EXPECT_EQ(got.first[2 * top_k + slot], -1);
      EXPECT_EQ(got.second[2 * top_k + slot], -std::numeric_limits<float>::infinity());
    }
  }
}

TEST(Indexer, PrefillRowsEachSeeTheirOwnKeys) {
  for (const bool causal : {true, false}) {
    // Nq = Nk: row t sees t + 1 keys; Nq > Nk: the first rows see none; Nq < Nk.
    for (const auto& [Nq, Nk] : {std::pair{97, 97}, std::pair{113, 40}, std::pair{5, 1025}}) {
      IndexerCase c({.keys = {Nk}, .Nq = Nq, .heads = 4, .d = 40, .top_k = 16, .dtype = DType::kF16,
                     .page_size = 16, .causal = causal}, Nq + Nk);
      ExpectExact(c);
      if (!causal) continue;
      const Outputs got = Kernel(c);
      for (std::int64_t t = 0; t < Nq; ++t) {
        const std::int64_t seen = std::clamp<std::int64_t>(t + Nk - Nq + 1, 0, Nk);
        for (std::int64_t slot = 0; slot < 16; ++slot) {
          const std::int32_t s = got.first[t * 16 + slot];
          EXPECT_EQ(s >= 0, slot < seen);
          EXPECT_LT(s, seen);
        }
      }
    }
  }
}

TEST(Indexer, TiesGoToTheLowerPosition) {
  IndexerCase c({.keys = {300}, .Nq = 1, .heads = 4, .d = 40, .top_k = 50, .page_size = 16}, 5);
  for (std::int64_t s = 1; s < 300; ++s) c.CopyKey(0, 0, s);  // every key the same: every score ties
  ExpectExact(c);
  const Outputs got = Kernel(c);
  for (std::int32_t slot = 0; slot < 50; ++slot) EXPECT_EQ(got.first[slot], slot);
  // Duplicates of a few keys among random ones: each group of equals in ascending position.
  IndexerCase d({.keys = {1025}, .Nq = 1, .heads = 64, .d = 128, .top_k = 300}, 6);
  for (std::int64_t s = 100; s < 1025; s += 7) d.CopyKey(0, s % 5, s);
  ExpectExact(d);
}

TEST(Indexer, NaNRanksLastAndInfFirst) {
  IndexerCase c({.keys = {60}, .Nq = 1, .heads = 2, .d = 16, .top_k = 60}, 8);
  for (std::int64_t i = 0; i < 2 * 16; ++i) c.SetQ(i, 1.0f);
  c.weights()[0] = 1.0f;
  c.weights()[1] = 2.0f;
  c.SetKey(0, 7, 3, std::numeric_limits<float>::quiet_NaN());
  c.SetKey(0, 9, 3, std::numeric_limits<float>::infinity());
  c.SetKey(0, 11, 4, std::numeric_limits<float>::quiet_NaN());
  ExpectExact(c);
  const Outputs got = Kernel(c);
  EXPECT_EQ(got.first[0], 9);
  EXPECT_EQ(got.second[0], std::numeric_limits<float>::infinity());
  EXPECT_EQ(got.first[58], 7);
  EXPECT_EQ(got.first[59], 11);
  EXPECT_TRUE(std::isnan(got.second[59]));
}

// Random (not integer) inputs: the kept scores, best first, agree with the reference's within float32 rounding
// (the i-th largest score moves no more than the scores do), and the kept keys are distinct visible keys.
TEST(Indexer, RandomInputsKeepTheTopScores) {
  for (const CacheElement element : {CacheElement::kFloat, CacheElement::kFp8E4M3}) {
    IndexerCase c({.keys = {3000, 1025}, .Nq = 2, .heads = 64, .d = 128, .top_k = 256, .dtype = DType::kBF16,
                   .element = element, .cache_dtype = DType::kBF16, .integers = false}, 12);
    const Outputs expected = Reference(c);
    for (const std::int64_t target : TargetsUnderTest()) {
      simd::RestrictTargetForTest(target);
      const Outputs got = Kernel(c);
      for (std::size_t i = 0; i < got.second.size(); ++i) {
        const double tolerance = 1e-4 * (1.0 + std::fabs(expected.second[i]));
        EXPECT_NEAR(got.second[i], expected.second[i], tolerance) << i << " on " << simd::TargetName(target);
      }
      // The kept keys are distinct and each within the visible range.
      for (std::int64_t row = 0; row < 4; ++row) {
        std::vector<std::int32_t> kept(got.first.begin() + row * 256, got.first.begin() + (row + 1) * 256);
        std::sort(kept.begin(), kept.end());
        EXPECT_EQ(std::adjacent_find(kept.begin(), kept.end()), kept.end());
        EXPECT_GE(kept.front(), 0);
      }
    }
    simd::RestrictTargetForTest(0);
  }
}

// Rows split into chunks (few rows, many keys) and rows that are not: bitwise the same outputs on every
// thread count.
TEST(Indexer, TheSameResultOnAnyThreadCount) {
  for (const std::int64_t Nq : {1, 3}) {
    IndexerCase c({.keys = {9000, 4100}, .Nq = Nq, .heads = 8, .d = 64, .top_k = 300, .dtype = DType::kF32,
                   .page_size = 256, .integers = false}, 20 + Nq);
    const Outputs one = Kernel(c, 1);
    for (const int threads : {2, 3, 8}) {
      IndexerParams p = c.params();
      p.num_threads = threads;  // Nq = 1: 2, 3 (an odd one out in a round of merges) and 4 chunks; Nq = 3: 1, 1, 3
      EXPECT_EQ(indexer_kernel::IndexerPlan(p).chunks, Nq == 1 ? std::min(threads, 4) : threads == 8 ? 3 : 1);
      const Outputs many = Kernel(c, threads);
      EXPECT_EQ(many.first, one.first) << threads << " threads, Nq=" << Nq;
      EXPECT_EQ(std::memcmp(many.second.data(), one.second.data(), one.second.size() * sizeof(float)), 0);
    }
  }
  // And exactly the reference's with integers, split into chunks.
  IndexerCase c({.keys = {9000}, .Nq = 1, .heads = 4, .d = 40, .top_k = 500}, 30);
  ASSERT_GE(indexer_kernel::IndexerPlan(c.params()).chunks, 2);  // on any thread count: one row, 9000 keys
  ExpectExact(c);
}

}  // namespace
}  // namespace flashattn::testing
