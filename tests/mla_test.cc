// Multi-head latent attention shapes: d = 576 (512 latent + 64 rotary features), dv = 512, one K/V head shared
// by many query heads, and the odd dims around them (575, 513). The forward and backward kernels on every
// compiled SIMD target against the float64 oracle; decode with V read as the first dv features of the K cache
// (v_cache == k_cache), contiguous and paged with pages of 64, appends written once; the head-dimension limit
// and the V-in-K rules refused with nothing written.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backward_test_problem.h"
#include "flashattn/flashattn.h"
#include "reference/reference.h"
#include "simd/targets.h"
#include "test_problem.h"
#include "test_targets.h"

namespace flashattn::testing {
namespace {

template <class Body>
void OnEveryTarget(Body&& body) {
  for (std::int64_t target : TargetsUnderTest()) {
    simd::RestrictTargetForTest(target);
    SCOPED_TRACE(simd::TargetName(target));
    body();
  }
  simd::RestrictTargetForTest(0);
}

std::vector<Shape> MlaShapes() {
  return {{.Nq = 97, .Nk = 113, .Hq = 8, .Hkv = 1, .d = 576, .dv = 512},
          {.Nq = 113, .Nk = 97, .Hq = 4, .Hkv = 1, .d = 575, .dv = 513},
          {.Nq = 1, .Nk = 1025, .Hq = 16, .Hkv = 1, .d = 576, .dv = 512, .dtype = DType::kBF16}};
}

TEST(Mla, ForwardWithinTwiceStandardOnEveryTarget) {
  for (const Shape& shape : MlaShapes()) {
    for (const Modifiers& m : {Modifiers{}, Modifiers{.causal = true}}) {
      Problem problem(shape, m, shape.d + shape.Nq);
      forward(problem.params(), Algorithm::kStandard);
      const Errors standard = CompareWithOracle(problem);
      const double slack = shape.dtype == DType::kF32 ? 1e-6 : 0.0;
      OnEveryTarget([&] {
        problem.ResetOutputs();
        forward(problem.params(), Algorithm::kFused);
        const Errors fused = CompareWithOracle(problem);
        EXPECT_LE(fused.o_error, 2 * standard.o_error + slack) << shape.ToString() << " " << m.ToString();
        EXPECT_LE(fused.lse_error, 2 * standard.lse_error + 1e-6) << shape.ToString() << " " << m.ToString();
      });
    }
  }
}

TEST(Mla, BackwardWithinTwiceStandardOnEveryTarget) {
  for (const Shape& shape : {Shape{.Nq = 33, .Nk = 41, .Hq = 4, .Hkv = 1, .d = 576, .dv = 512},
                             Shape{.Nq = 19, .Nk = 23, .Hq = 2, .Hkv = 1, .d = 575, .dv = 513}}) {
    BackwardProblem x(shape, {.causal = true}, 3, {}, Algorithm::kOracle);
    backward(x.params(), BackwardAlgorithm::kStandard);
    const GradientErrors standard = CompareGradientsWithOracle(x);
    OnEveryTarget([&] {
      x.ResetGradients();
      backward(x.params(), BackwardAlgorithm::kFused);
      const GradientErrors fused = CompareGradientsWithOracle(x);
      EXPECT_LE(fused.dq, 2 * standard.dq + 1e-6) << shape.ToString();
      EXPECT_LE(fused.dk, 2 * standard.dk + 1e-6) << shape.ToString();
      EXPECT_LE(fused.dv, 2 * standard.dv + 1e-6) << shape.ToString();
    });
  }
}

// A float32 MLA decode problem: one K/V head whose V is the first dv features of K, in a contiguous cache or
// in shuffled pages of `page_size` rows; `appended` new keys (k_new only).
struct MlaDecode {
  static constexpr std::int64_t kHq = 16, kD = 576, kDv = 512;
  std::int64_t page_size, appended;
  std::vector<std::int32_t> cached;
  std::int64_t capacity;  // keys per sequence
  std::vector<float> q, cache, k_new, o, lse;
  std::vector<std::int32_t> block_table;
  DecodeParams p;

  MlaDecode(std::vector<std::int32_t> lengths, std::int64_t page, std::int64_t new_keys, std::int64_t splits)
      : page_size(page), appended(new_keys), cached(std::move(lengths)), capacity(448) {
    const std::int64_t batch = static_cast<std::int64_t>(cached.size());
    std::mt19937_64 rng(91);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const auto fill = [&](std::vector<float>& x, std::int64_t n) {
      x.resize(n);
      for (float& e : x) e = normal(rng);
    };
    fill(q, batch * kHq * kD);
    fill(cache, batch * capacity * kD);
    fill(k_new, batch * appended * kD);
    o.assign(batch * kHq * kDv, std::numeric_limits<float>::quiet_NaN());
    lse.assign(batch * kHq, std::numeric_limits<float>::quiet_NaN());
    p.q = q.data(), p.k_cache = p.v_cache = cache.data(), p.o = o.data(), p.lse = lse.data();
    p.cache_seqlens = cached.data();
    p.batch = batch, p.seqlen_q = 1, p.heads_q = kHq, p.heads_kv = 1, p.head_dim = kD, p.head_dim_v = kDv;
    p.seqlen_new = appended, p.k_new = appended > 0 ? k_new.data() : nullptr;
    p.num_splits = splits;
    if (page_size > 0) {  // pages of every sequence in reverse order
      const std::int64_t pages = capacity / page_size;
      for (std::int64_t b = 0; b < batch; ++b)
        for (std::int64_t n = 0; n < pages; ++n) block_table.push_back(static_cast<std::int32_t>((batch - b) * pages - 1 - n));
      p.block_table = block_table.data(), p.block_table_stride = pages, p.max_pages = pages;
      p.num_pages = batch * pages, p.page_size = page_size;
    } else {
      p.cache_seqlen_max = capacity;
    }
    p.set_contiguous_strides();
  }

  // Row j of sequence b's keys in the cache.
  const float* Key(std::int64_t b, std::int64_t j) const {
    if (page_size == 0) return &cache[(b * capacity + j) * kD];
    return &cache[(block_table[b * (capacity / page_size) + j / page_size] * page_size + j % page_size) * kD];
  }

  // The oracle over the cache after the call: keys [0, cached + appended), V = their first dv features.
  void ExpectMatchesOracle(const std::string& label) const {
    for (std::int64_t b = 0; b < p.batch; ++b) {
      const std::int64_t Nk = cached[b] + appended;
      for (std::int64_t i = 0; i < appended; ++i)
        for (std::int64_t e = 0; e < kD; ++e) ASSERT_EQ(Key(b, cached[b] + i)[e], k_new[(b * appended + i) * kD + e]);
      std::vector<float> K(std::max<std::int64_t>(1, Nk * kD)), V(std::max<std::int64_t>(1, Nk * kDv));
      for (std::int64_t j = 0; j < Nk; ++j) {
        std::copy_n(Key(b, j), kD, &K[j * kD]);
        std::copy_n(Key(b, j), kDv, &V[j * kDv]);
      }
      AttentionParams a;
      a.q = &q[b * kHq * kD], a.k = K.data(), a.v = V.data();
      a.batch = 1, a.seqlen_q = 1, a.seqlen_k = Nk, a.heads_q = kHq, a.heads_kv = 1, a.head_dim = kD;
      a.head_dim_v = kDv;
      a.set_contiguous_strides();
      double max_diff = 0.0, max_ref = 0.0;
      for (std::int64_t h = 0; h < kHq; ++h) {
        const reference::OracleRows ref = reference::OracleHeadRows(a, 0, h, 0, 1);
        for (std::int64_t e = 0; e < kDv; ++e) {
          max_diff = std::max(max_diff, std::fabs(o[(b * kHq + h) * kDv + e] - ref.o[e]));
          max_ref = std::max(max_ref, std::fabs(ref.o[e]));
        }
        if (std::isinf(ref.lse[0])) {
          EXPECT_EQ(lse[b * kHq + h], ref.lse[0]) << label;
        } else {
          EXPECT_NEAR(lse[b * kHq + h], ref.lse[0], 1e-5 * std::max(1.0, std::fabs(ref.lse[0]))) << label;
        }
      }
      EXPECT_LE(max_diff, 1e-5 * std::max(1e-30, max_ref)) << label << " sequence " << b;
    }
  }
};

TEST(Mla, DecodeReadsValuesInsideTheKeyCacheOnEveryTarget) {
  for (std::int64_t page_size : {std::int64_t{0}, std::int64_t{64}}) {
    for (std::int64_t splits : {1, 3}) {
      for (std::int64_t appended : {0, 2}) {
        const std::string label = "page_size=" + std::to_string(page_size) + " splits=" + std::to_string(splits) +
                                  " appended=" + std::to_string(appended);
        OnEveryTarget([&] {
          MlaDecode x({300, 77, 0}, page_size, appended, splits);
          decode(x.p);
          x.ExpectMatchesOracle(label);
        });
      }
    }
  }
}

TEST(Mla, BadShapesAreRefusedWithoutWriting) {
  Problem problem({.Nq = 3, .Nk = 4, .Hq = 1, .Hkv = 1, .d = 16, .dv = 16}, {}, 1);
  problem.params().head_dim = kMaxHeadDim + 1;
  EXPECT_THROW(validate(problem.params()), Error);
  problem.params().head_dim = 16;
  problem.params().head_dim_v = kMaxHeadDim + 1;
  EXPECT_THROW(validate(problem.params()), Error);

  MlaDecode x({10}, 0, 1, 1);
  const std::vector<float> cache = x.cache;
  x.p.head_dim = 500;  // K rows of 500 features cannot hold 512 values
  try {
    decode(x.p);
    ADD_FAILURE() << "V inside K with dv > d accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim_v=512 exceeds head_dim=500"), std::string::npos) << e.what();
  }
  x.p.head_dim = MlaDecode::kD;
  std::vector<float> v_new(MlaDecode::kDv);
  x.p.v_new = v_new.data();  // V inside K takes no v_new
  EXPECT_THROW(decode(x.p), Error);
  EXPECT_EQ(x.cache, cache);
  EXPECT_TRUE(std::all_of(x.o.begin(), x.o.end(), [](float v) { return std::isnan(v); }));
}

}  // namespace
}  // namespace flashattn::testing
