// The gradient of the attention sinks, dsinks_h = −Σ_{b,i} e^{s_h − LSE_i}·D_i (docs/backward.md): the float64
// oracle's against finite differences of its own loss, the standard and fused backward passes (every
// compiled SIMD target) against the oracle with masks, modifiers, GQA and dropout, dQ/dK/dV with sinks,
// backward_varlen's sum over sequences, a −∞ sink changing no bit, and the rejected inputs.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backward_test_problem.h"
#include "flashattn/flashattn.h"
#include "reference/backward.h"
#include "simd/targets.h"
#include "test_targets.h"

namespace flashattn::testing {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> MixedSinks(std::int64_t heads) {
  std::vector<float> sinks;
  for (std::int64_t h = 0; h < heads; ++h) sinks.push_back(h % 3 == 2 ? -kInf : 0.5f * static_cast<float>(h) - 0.25f);
  return sinks;
}

// A backward problem whose forward pass (`algorithm`) ran with `sinks`, asking for dsinks.
struct SinkProblem {
  BackwardProblem x;
  std::vector<float> sinks, dsinks;

  SinkProblem(const Shape& shape, const Modifiers& modifiers, std::vector<float> sink_values, Dropout dropout = {},
              Algorithm algorithm = Algorithm::kOracle, std::uint64_t seed = 1)
      : x(shape, modifiers, seed, dropout), sinks(std::move(sink_values)),
        dsinks(static_cast<std::size_t>(shape.Hq), std::numeric_limits<float>::quiet_NaN()) {
    x.forward().params().sinks = sinks.data();
    x.RecomputeForward(algorithm);
    x.params().dsinks = dsinks.data();
  }

  std::vector<float> Run(BackwardAlgorithm algorithm) {
    x.ResetGradients();
    std::fill(dsinks.begin(), dsinks.end(), std::numeric_limits<float>::quiet_NaN());
    backward(x.params(), algorithm);
    return dsinks;
  }
};

// max |a − ref| / max(1e-3, max |ref|).
double SinkError(const std::vector<float>& a, const std::vector<float>& ref) {
  double diff = 0.0, scale = 1e-3;
  for (std::size_t h = 0; h < a.size(); ++h) {
    diff = std::isnan(a[h]) ? INFINITY : std::max(diff, std::fabs(double(a[h]) - ref[h]));
    scale = std::max(scale, std::fabs(double(ref[h])));
  }
  return diff / scale;
}

// The oracle's dsinks against central differences of ⟨dO, O⟩ in the sink (float64 forward, step 2⁻¹⁰, exact
// on the sinks' grid), with rows that see no key and every modifier.
TEST(SinksGradient, OracleMatchesFiniteDifferences) {
  const Shape shape{.Nq = 13, .Nk = 9, .Hq = 3, .Hkv = 1, .d = 16, .dv = 12};
  for (const Modifiers& m : {Modifiers{}, Modifiers{.causal = true}, Modifiers{.softcap = 3.0f, .alibi = true},
                             Modifiers{.window_left = 2, .window_right = 1}}) {
    SinkProblem p(shape, m, {0.5f, -1.25f, 2.0f});
    const reference::OracleGradients g = reference::OracleBackwardGroup(p.x.params(), 0, 0);
    const double step = 1.0 / 1024;
    for (std::int64_t h = 0; h < shape.Hq; ++h) {
      const float s = p.sinks[h];
      p.sinks[h] = s + static_cast<float>(step);
      const double plus = reference::OracleLoss(p.x.params());
      p.sinks[h] = s - static_cast<float>(step);
      const double minus = reference::OracleLoss(p.x.params());
      p.sinks[h] = s;
      const double numeric = (plus - minus) / (2 * step);
      EXPECT_NEAR(g.dsinks[h], numeric, 1e-5 * std::max(1.0, std::fabs(numeric))) << m.ToString() << " h=" << h;
      EXPECT_NE(g.dsinks[h], 0.0) << m.ToString() << " h=" << h;
    }
  }
}

struct Case {
  Shape shape;
  Modifiers modifiers;
  Dropout dropout;
};

std::vector<Case> BackwardCases() {
  const Shape ragged{.batch = 2, .Nq = 97, .Nk = 113, .Hq = 6, .Hkv = 2, .d = 40, .dv = 40};
  std::vector<Case> cases;
  for (const Modifiers& m : ModifierMatrix()) cases.push_back({ragged, m, {}});
  cases.push_back({ragged, {.causal = true}, {.p = 0.2f, .seed = 3, .offset = 1}});
  cases.push_back({{.Nq = 113, .Nk = 97, .Hq = 3, .Hkv = 1, .d = 59, .dv = 40}, {.causal = true}, {}});
  cases.push_back({{.Nq = 1, .Nk = 1025, .Hq = 2, .Hkv = 1, .d = 111, .dv = 111}, {}, {}});
  cases.push_back({{.Nq = 97, .Nk = 97, .Hq = 3, .Hkv = 3, .d = 40, .dv = 40, .dtype = DType::kBF16},
                   {.softcap = 8.0f}, {}});
  return cases;
}

// Standard and fused (every target) against the oracle: dsinks, and dQ, dK, dV within the kernel tests'
// bound (twice the standard's error plus 1e-6 in float32, three times in bfloat16).
TEST(SinksGradient, StandardAndFusedMatchTheOracleOnEveryTarget) {
  for (const Case& c : BackwardCases()) {
    const std::string label = c.shape.ToString() + " " + c.modifiers.ToString();
    SinkProblem p(c.shape, c.modifiers, MixedSinks(c.shape.Hq), c.dropout);
    const std::vector<float> oracle = p.Run(BackwardAlgorithm::kOracle);
    const std::vector<float> standard = p.Run(BackwardAlgorithm::kStandard);
    const GradientErrors standard_errors = CompareGradientsWithOracle(p.x);
    const double standard_error = SinkError(standard, oracle);
    const bool f32 = c.shape.dtype == DType::kF32;
    if (f32) EXPECT_LE(standard_error, 1e-4) << label;
    for (std::int64_t h = 2; h < c.shape.Hq; h += 3) EXPECT_EQ(oracle[h], 0.0f) << label << " (−∞ sink)";
    const auto bound = [&](double e) { return f32 ? 2 * e + 1e-6 : 3 * e; };
    for (std::int64_t target : TargetsUnderTest()) {
      simd::RestrictTargetForTest(target);
      const std::vector<float> fused = p.Run(BackwardAlgorithm::kFused);
      const GradientErrors e = CompareGradientsWithOracle(p.x);
      const std::string where = label + " on " + simd::TargetName(target);
      EXPECT_LE(SinkError(fused, oracle), std::max(2 * standard_error, 1e-5)) << where;
      EXPECT_LE(e.dq, bound(standard_errors.dq)) << where;
      EXPECT_LE(e.dk, bound(standard_errors.dk)) << where;
      EXPECT_LE(e.dv, bound(standard_errors.dv)) << where;
    }
    simd::RestrictTargetForTest(0);
  }
}

// Every head's sink −∞: the gradients are the bits of a call without sinks, and dsinks is 0.
TEST(SinksGradient, NegativeInfinitySinkChangesNoBit) {
  const Shape shape{.batch = 2, .Nq = 61, .Nk = 75, .Hq = 4, .Hkv = 2, .d = 24, .dv = 17};
  for (std::int64_t target : TargetsUnderTest()) {
    simd::RestrictTargetForTest(target);
    for (BackwardAlgorithm algorithm : {BackwardAlgorithm::kStandard, BackwardAlgorithm::kFused}) {
      BackwardProblem plain(shape, {.causal = true}, 5, {}, Algorithm::kFused);
      backward(plain.params(), algorithm);
      SinkProblem none(shape, {.causal = true}, std::vector<float>(4, -kInf), {}, Algorithm::kFused, 5);
      const std::vector<float> dsinks = none.Run(algorithm);
      EXPECT_EQ(none.x.GradientBits(), plain.GradientBits()) << simd::TargetName(target);
      EXPECT_EQ(dsinks, std::vector<float>(4, 0.0f));
    }
  }
  simd::RestrictTargetForTest(0);
}

// A sink set without dsinks computes the other gradients as usual; dsinks without sinks, and a NaN sink,
// are refused before any gradient is written.
TEST(SinksGradient, BadInputIsRefusedWithoutWriting) {
  const Shape shape{.Nq = 5, .Nk = 7, .Hq = 3, .Hkv = 1, .d = 16, .dv = 16};
  BackwardProblem plain(shape, {}, 9);
  std::vector<float> dsinks(3, 7.0f);
  plain.params().dsinks = dsinks.data();
  const std::vector<std::uint16_t> before = plain.GradientBits();
  try {
    backward(plain.params());
    ADD_FAILURE() << "dsinks without sinks accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention.sinks is null"), std::string::npos) << e.what();
  }
  EXPECT_EQ(plain.GradientBits(), before);
  EXPECT_EQ(dsinks, std::vector<float>(3, 7.0f));

  SinkProblem p(shape, {}, {0.0f, 1.0f, 2.0f});
  p.sinks[1] = std::numeric_limits<float>::quiet_NaN();
  p.x.ResetGradients();
  std::fill(p.dsinks.begin(), p.dsinks.end(), 7.0f);
  const std::vector<std::uint16_t> nan_before = p.x.GradientBits();
  EXPECT_THROW(backward(p.x.params()), Error);
  EXPECT_EQ(p.x.GradientBits(), nan_before);
  EXPECT_EQ(p.dsinks, std::vector<float>(3, 7.0f));
}

// backward_varlen: dsinks is the sum over the sequences of each one's batch-1 dsinks.
TEST(SinksGradient, VarlenSumsTheSequences) {
  constexpr std::int64_t Hq = 4, Hkv = 2, d = 24;
  const std::vector<std::int32_t> cu_q = {0, 3, 3, 40, 41}, cu_k = {0, 7, 11, 60, 60};
  const std::int64_t total_q = cu_q.back(), total_k = cu_k.back();
  const std::vector<float> sinks = MixedSinks(Hq);
  BackwardProblem packed({.Nq = total_q, .Nk = total_k, .Hq = Hq, .Hkv = Hkv, .d = d, .dv = d}, {}, 12);
  const AttentionParams& a = packed.params().attention;
  VarlenBackwardParams v;
  VarlenParams& f = v.forward;
  static_cast<AttentionSettings&>(f) = a;
  f.causal = true;
  f.sinks = sinks.data();
  f.q = a.q, f.k = a.k, f.v = a.v, f.o = a.o, f.lse = a.lse;
  f.batch = 4, f.total_q = total_q, f.total_k = total_k, f.cu_seqlens_q = cu_q.data(), f.cu_seqlens_k = cu_k.data();
  f.max_seqlen_q = 37, f.max_seqlen_k = 49;
  forward_varlen(f);
  v.d_o = packed.params().d_o, v.dq = packed.params().dq, v.dk = packed.params().dk, v.dv = packed.params().dv;
  std::vector<float> dsinks(Hq, std::numeric_limits<float>::quiet_NaN());
  v.dsinks = dsinks.data();
  backward_varlen(v);
  std::vector<double> expected(Hq, 0.0);
  for (std::int64_t b = 0; b < f.batch; ++b) {
    BackwardParams s;
    s.attention = a;
    s.attention.causal = true;
    s.attention.sinks = sinks.data();
    s.attention.seqlen_q = cu_q[b + 1] - cu_q[b], s.attention.seqlen_k = cu_k[b + 1] - cu_k[b];
    s.attention.q = static_cast<const float*>(a.q) + cu_q[b] * Hq * d;
    s.attention.o = static_cast<float*>(a.o) + cu_q[b] * Hq * d;
    s.attention.k = static_cast<const float*>(a.k) + cu_k[b] * Hkv * d;
    s.attention.v = static_cast<const float*>(a.v) + cu_k[b] * Hkv * d;
    std::vector<float> lse(std::max<std::int64_t>(1, Hq * s.attention.seqlen_q));
    for (std::int64_t h = 0; h < Hq; ++h)
      for (std::int64_t i = 0; i < s.attention.seqlen_q; ++i) lse[h * s.attention.seqlen_q + i] = a.lse[h * total_q + cu_q[b] + i];
    s.attention.lse = lse.data();
    std::vector<float> d_o(static_cast<const float*>(packed.params().d_o) + cu_q[b] * Hq * d,
                           static_cast<const float*>(packed.params().d_o) + cu_q[b + 1] * Hq * d);
    std::vector<float> dq(std::max<std::size_t>(1, d_o.size())), dk(std::max<std::int64_t>(1, s.attention.seqlen_k * Hkv * d)),
        dv(dk.size()), share(Hq);
    s.d_o = d_o.data(), s.dq = dq.data(), s.dk = dk.data(), s.dv = dv.data(), s.dsinks = share.data();
    s.do_strides = s.dq_strides = s.attention.q_strides;
    s.dk_strides = s.dv_strides = s.attention.k_strides;
    backward(s, BackwardAlgorithm::kOracle);
    for (std::int64_t h = 0; h < Hq; ++h) expected[h] += share[h];
  }
  for (std::int64_t h = 0; h < Hq; ++h) EXPECT_NEAR(dsinks[h], expected[h], 1e-5 * std::max(1.0, std::fabs(expected[h])));
}

}  // namespace
}  // namespace flashattn::testing
