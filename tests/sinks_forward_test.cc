// Attention sinks in the forward pass: one logit s_h per query head joins every row's softmax denominator
// (types.h, ScoreSettings::sinks). Every reference algorithm and the fused kernel on every compiled SIMD
// target against the float64 oracle, with each mask and modifier, dropout, GQA, varlen and split-KV decode;
// rows that see no key (O = 0, LSE = s_h); a sink of −∞ changes no bit; a large sink dominates its rows; NaN
// and +∞ sinks are refused before anything is written.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "decode_test_case.h"
#include "flashattn/flashattn.h"
#include "reference/reference.h"
#include "simd/targets.h"
#include "test_problem.h"
#include "test_targets.h"

namespace flashattn::testing {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Sinks of Hq heads around `center`, every third one −∞ (that head has no sink).
std::vector<float> MixedSinks(std::int64_t heads, float center) {
  std::vector<float> sinks;
  for (std::int64_t h = 0; h < heads; ++h) sinks.push_back(h % 3 == 2 ? -kInf : center + 0.75f * (h % 3) - 0.5f);
  return sinks;
}

// Runs `body()` once restricted to each compiled SIMD target this CPU runs.
template <class Body>
void OnEveryTarget(Body&& body) {
  const std::vector<std::int64_t> targets = TargetsUnderTest();
  ASSERT_FALSE(targets.empty());
  for (std::int64_t target : targets) {
    simd::RestrictTargetForTest(target);
    SCOPED_TRACE(simd::TargetName(target));
    body();
  }
  simd::RestrictTargetForTest(0);
}

struct Case {
  Shape shape;
  Modifiers modifiers;
  float dropout_p = 0.0f;
};

std::vector<Case> ForwardCases() {
  std::vector<Case> cases;
  const Shape ragged{.batch = 2, .Nq = 97, .Nk = 113, .Hq = 6, .Hkv = 2, .d = 40, .dv = 40};
  for (const Modifiers& m : ModifierMatrix()) cases.push_back({ragged, m});
  cases.push_back({{.Nq = 113, .Nk = 97, .Hq = 3, .Hkv = 1, .d = 59, .dv = 111}, {.causal = true}});
  cases.push_back({{.Nq = 1, .Nk = 1025, .Hq = 4, .Hkv = 4, .d = 256, .dv = 256}, {.window_left = 300}});
  cases.push_back({{.Nq = 97, .Nk = 97, .Hq = 3, .Hkv = 3, .d = 111, .dv = 111, .dtype = DType::kBF16},
                   {.softcap = 8.0f, .alibi = true}});
  cases.push_back({{.Nq = 97, .Nk = 113, .Hq = 3, .Hkv = 1, .d = 40, .dv = 40, .dtype = DType::kF16},
                   {.causal = true}});
  cases.push_back({ragged, {.causal = true}, 0.25f});
  return cases;
}

// Every reference algorithm within 1e-5 of the oracle in float32 (the float64 oracle defines the sink's
// semantics), and the fused kernel on every target within twice the same-precision standard's error.
TEST(SinksForward, EveryAlgorithmAndTargetMatchesTheOracle) {
  for (const Case& c : ForwardCases()) {
    const std::string label = c.shape.ToString() + " " + c.modifiers.ToString() + " p=" + std::to_string(c.dropout_p);
    Problem problem(c.shape, c.modifiers, 11 + c.shape.Nq + c.shape.d);
    const std::vector<float> sinks = MixedSinks(c.shape.Hq, 1.5f);
    problem.params().sinks = sinks.data();
    problem.params().dropout_p = c.dropout_p;
    problem.params().dropout_seed = 5;
    forward(problem.params(), Algorithm::kStandard);
    const Errors standard = CompareWithOracle(problem);
    const bool f32 = c.shape.dtype == DType::kF32;
    if (f32) {
      EXPECT_LE(standard.o_error, 1e-5) << label;
      for (Algorithm algorithm : {Algorithm::kFlash1, Algorithm::kFlash2}) {
        problem.ResetOutputs();
        forward(problem.params(), algorithm);
        const Errors e = CompareWithOracle(problem);
        EXPECT_LE(e.o_error, 1e-5) << label << " " << to_string(algorithm);
        EXPECT_LE(e.lse_error, 1e-6) << label << " " << to_string(algorithm);
      }
    }
    OnEveryTarget([&] {
      problem.ResetOutputs();
      forward(problem.params(), Algorithm::kFused);
      const Errors fused = CompareWithOracle(problem);
      EXPECT_LE(fused.o_error, 2 * standard.o_error + (f32 ? 1e-6 : 0.0)) << label;
      EXPECT_LE(fused.lse_error, 2 * standard.lse_error + 1e-6) << label;
    });
  }
}

// Causal with Nq > Nk: rows i < Nq − Nk see no key. With a sink they give O = 0 and LSE = s_h exactly.
TEST(SinksForward, RowsThatSeeNoKeyGiveZeroAndTheSink) {
  const Shape shape{.Nq = 9, .Nk = 4, .Hq = 3, .Hkv = 1, .d = 40, .dv = 40};
  Problem problem(shape, {.causal = true}, 3);
  const std::vector<float> sinks = {0.25f, -3.0f, -kInf};
  problem.params().sinks = sinks.data();
  const auto check = [&](const std::string& label) {
    for (std::int64_t h = 0; h < shape.Hq; ++h)
      for (std::int64_t i = 0; i < shape.Nq - shape.Nk; ++i) {
        EXPECT_EQ(problem.Lse(0, h, i), sinks[h]) << label << " h=" << h << " i=" << i;
        for (std::int64_t c = 0; c < shape.dv; ++c) EXPECT_EQ(problem.O(0, i, h, c), 0.0f) << label;
      }
    EXPECT_LE(CompareWithOracle(problem).o_error, 1e-5) << label;
  };
  for (Algorithm algorithm : kAllAlgorithms) {
    if (algorithm == Algorithm::kFused) continue;
    problem.ResetOutputs();
    forward(problem.params(), algorithm);
    check(std::string(to_string(algorithm)));
  }
  OnEveryTarget([&] {
    problem.ResetOutputs();
    forward(problem.params(), Algorithm::kFused);
    check("fused");
  });
}

// A sink of −∞ on every head gives the bits of a call without sinks, in every algorithm and on every target.
TEST(SinksForward, NegativeInfinitySinkChangesNoBit) {
  for (const Case& c : ForwardCases()) {
    Problem problem(c.shape, c.modifiers, 29 + c.shape.Nk);
    const std::vector<float> none(c.shape.Hq, -kInf);
    const auto run = [&](Algorithm algorithm, const float* sinks) {
      problem.ResetOutputs();
      problem.params().sinks = sinks;
      forward(problem.params(), algorithm);
      return OutputValues(problem);
    };
    for (Algorithm algorithm : kAllAlgorithms) {
      if (algorithm == Algorithm::kFused) continue;
      EXPECT_TRUE(BitwiseEqual(run(algorithm, nullptr), run(algorithm, none.data()))) << to_string(algorithm);
    }
    OnEveryTarget([&] {
      EXPECT_TRUE(BitwiseEqual(run(Algorithm::kFused, nullptr), run(Algorithm::kFused, none.data())))
          << c.shape.ToString() << " " << c.modifiers.ToString();
    });
  }
}

// A sink far above every score takes nearly all of each row's weight: LSE ≈ s_h, O ≈ 0, as the oracle says.
TEST(SinksForward, LargePositiveSinkDominatesItsRows) {
  const Shape shape{.Nq = 97, .Nk = 113, .Hq = 2, .Hkv = 1, .d = 59, .dv = 59};
  Problem problem(shape, {}, 41);
  const std::vector<float> sinks = {60.0f, 1.0e4f};
  problem.params().sinks = sinks.data();
  OnEveryTarget([&] {
    problem.ResetOutputs();
    forward(problem.params(), Algorithm::kFused);
    EXPECT_LE(CompareWithOracle(problem).lse_error, 1e-6);
    for (std::int64_t h = 0; h < shape.Hq; ++h)
      for (std::int64_t i = 0; i < shape.Nq; ++i) {
        EXPECT_NEAR(problem.Lse(0, h, i), sinks[h], 1e-6 * sinks[h]);
        for (std::int64_t c = 0; c < shape.dv; ++c) EXPECT_LE(std::fabs(problem.O(0, i, h, c)), 1e-15f);
      }
  });
}

// NaN and +∞ sinks are refused, naming the head, before anything is written.
TEST(SinksForward, NaNAndInfiniteSinksAreRefusedWithoutWriting) {
  const Shape shape{.Nq = 5, .Nk = 7, .Hq = 3, .Hkv = 1, .d = 16, .dv = 16};
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), kInf}) {
    Problem problem(shape, {}, 2);
    const std::vector<float> sinks = {0.0f, 1.0f, bad};
    problem.params().sinks = sinks.data();
    const std::vector<float> before = OutputValues(problem);
    for (Algorithm algorithm : kAllAlgorithms) {
      try {
        forward(problem.params(), algorithm);
        ADD_FAILURE() << "sink " << bad << " accepted by " << to_string(algorithm);
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("sinks must be finite or -inf"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("at head 2"), std::string::npos) << e.what();
      }
      EXPECT_TRUE(BitwiseEqual(OutputValues(problem), before));
    }
  }
}

// forward_varlen with sinks: each sequence is its batch-1 problem, with the same sinks.
TEST(SinksForward, VarlenSequencesMatchTheirOwnOracle) {
  constexpr std::int64_t Hq = 4, Hkv = 2, d = 40;
  const std::vector<std::int32_t> cu_q = {0, 5, 5, 102, 103}, cu_k = {0, 3, 9, 122, 122};
  const std::vector<float> sinks = MixedSinks(Hq, 0.5f);
  const std::int64_t total_q = cu_q.back(), total_k = cu_k.back();
  Problem packed({.Nq = total_q, .Nk = total_k, .Hq = Hq, .Hkv = Hkv, .d = d, .dv = d}, {}, 8);
  VarlenParams v;
  static_cast<AttentionSettings&>(v) = packed.params();
  v.causal = true;
  v.sinks = sinks.data();
  v.q = packed.params().q, v.k = packed.params().k, v.v = packed.params().v;
  v.o = packed.params().o, v.lse = packed.params().lse;
  v.batch = 4, v.total_q = total_q, v.total_k = total_k, v.cu_seqlens_q = cu_q.data(), v.cu_seqlens_k = cu_k.data();
  v.max_seqlen_q = 97, v.max_seqlen_k = 113;
  forward_varlen(v);
  for (std::int64_t b = 0; b < v.batch; ++b) {
    const std::int64_t q0 = cu_q[b], k0 = cu_k[b], Nq = cu_q[b + 1] - q0, Nk = cu_k[b + 1] - k0;
    AttentionParams a = packed.params();
    a.causal = true;
    a.sinks = sinks.data();
    a.seqlen_q = Nq, a.seqlen_k = Nk;
    a.q = static_cast<const float*>(a.q) + q0 * Hq * d;
    a.k = static_cast<const float*>(a.k) + k0 * Hkv * d;
    a.v = static_cast<const float*>(a.v) + k0 * Hkv * d;
    a.q_strides.batch = a.k_strides.batch = a.v_strides.batch = 0;
    for (std::int64_t h = 0; h < Hq; ++h) {
      const reference::OracleRows ref = reference::OracleHeadRows(a, 0, h, 0, Nq);
      for (std::int64_t i = 0; i < Nq; ++i) {
        const double lse = packed.Lse(0, h, q0 + i);
        EXPECT_TRUE(std::isinf(ref.lse[i]) ? lse == ref.lse[i] : std::fabs(lse - ref.lse[i]) <= 1e-5 * std::fabs(ref.lse[i]) + 1e-5)
            << "sequence " << b << " h=" << h << " i=" << i << ": " << lse << " vs " << ref.lse[i];
        for (std::int64_t c = 0; c < d; ++c) EXPECT_NEAR(packed.O(0, q0 + i, h, c), ref.o[i * d + c], 1e-5);
      }
    }
  }
}

// decode() adds each head's sink once, in the merge of the chunks: any number of chunks, contiguous or paged
// (page size 64), agrees with the float64 forward over the same cache; a sequence with no key gives O = 0,
// LSE = s_h.
TEST(SinksDecode, SplitKvAddsTheSinkOnceOnEveryTarget) {
  for (std::int64_t page_size : {std::int64_t{0}, std::int64_t{64}}) {
    for (std::int64_t splits : {1, 3, 8}) {
      const DecodeShape shape{.Nq = 2, .Nnew = 1, .Hq = 6, .Hkv = 2, .d = 40, .Nmax = 320,
                              .cached = {300, 17, 0}, .page_size = page_size};
      for (const DecodeMods& mods : {DecodeMods{}, DecodeMods{.causal = true, .softcap = 10.0f},
                                     DecodeMods{.window_left = 50, .alibi = true}}) {
        const std::vector<float> sinks = MixedSinks(shape.Hq, 2.0f);
        OnEveryTarget([&] {
          DecodeCase c(shape, mods, 17 + splits);
          c.params().sinks = sinks.data();
          c.params().num_splits = splits;
          decode(c.params());
          const Errors e = CompareWithForward(c, Algorithm::kOracle);
          EXPECT_LE(e.o_error, 1e-5) << shape.ToString() << " " << mods.ToString() << " splits=" << splits;
          EXPECT_LE(e.lse_error, 1e-6) << shape.ToString() << " " << mods.ToString() << " splits=" << splits;
        });
      }
    }
  }
  const DecodeShape empty{.Nq = 1, .Hq = 3, .Hkv = 1, .d = 16, .Nmax = 8, .cached = {0}};
  DecodeCase c(empty, {}, 4);
  const std::vector<float> sinks = {1.5f, -2.0f, -kInf};
  c.params().sinks = sinks.data();
  c.params().num_splits = 4;
  decode(c.params());
  for (std::int64_t h = 0; h < empty.Hq; ++h) {
    EXPECT_EQ(c.Lse(0, h, 0), sinks[h]);
    for (std::int64_t e = 0; e < empty.d; ++e) EXPECT_EQ(c.O(0, 0, h, e), 0.0f);
  }
}

// decode() with a −∞ sink on every head gives the bits of a call without sinks; a NaN sink is refused with
// the cache and the outputs untouched.
TEST(SinksDecode, NegativeInfinityChangesNoBitAndNaNIsRefused) {
  const DecodeShape shape{.Nq = 3, .Nnew = 2, .Hq = 4, .Hkv = 2, .d = 59, .Nmax = 200, .cached = {150, 9}};
  const std::vector<float> none(shape.Hq, -kInf);
  OnEveryTarget([&] {
    DecodeCase plain(shape, {.causal = true}, 6), with_none(shape, {.causal = true}, 6);
    plain.params().num_splits = with_none.params().num_splits = 3;
    with_none.params().sinks = none.data();
    decode(plain.params());
    decode(with_none.params());
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t h = 0; h < shape.Hq; ++h)
        for (std::int64_t i = 0; i < shape.Nq; ++i) {
          EXPECT_EQ(std::bit_cast<std::uint32_t>(plain.Lse(b, h, i)), std::bit_cast<std::uint32_t>(with_none.Lse(b, h, i)));
          for (std::int64_t e = 0; e < shape.d; ++e)
            EXPECT_EQ(std::bit_cast<std::uint32_t>(plain.O(b, i, h, e)),
                      std::bit_cast<std::uint32_t>(with_none.O(b, i, h, e)));
        }
  });
  DecodeCase c(shape, {}, 6);
  const std::vector<float> nan_sinks = {0.0f, std::numeric_limits<float>::quiet_NaN(), 0.0f, 0.0f};
  c.params().sinks = nan_sinks.data();
  const std::vector<std::uint16_t> cache = c.CacheSnapshot();
  const float o_before = c.O(0, 0, 0, 0);
  EXPECT_THROW(decode(c.params()), Error);
  EXPECT_EQ(c.CacheSnapshot(), cache);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(c.O(0, 0, 0, 0)), std::bit_cast<std::uint32_t>(o_before));
}

}  // namespace
}  // namespace flashattn::testing
