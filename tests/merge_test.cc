// merge_attention_states (include/flashattn/merge.h): the merge of partial results by their LSE.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "common/element.h"
#include "flashattn/merge.h"
#include "reference/reference.h"
#include "test_problem.h"

namespace flashattn::testing {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Partial states in the merge layout: O (num_partials, batch, seqlen, heads, dv), LSE (num_partials, batch,
// heads, seqlen), all float32.
struct Partials {
  std::int64_t batch = 1, seqlen = 1, heads = 1, dv = 1;
  std::vector<float> O, lse;
  std::int64_t Rows() const { return batch * seqlen * heads; }
  std::int64_t Count() const { return static_cast<std::int64_t>(lse.size()) / Rows(); }
  // Appends partial k of `other` (same shape).
  void Append(const Partials& other, std::int64_t k) {
    O.insert(O.end(), other.O.begin() + k * Rows() * dv, other.O.begin() + (k + 1) * Rows() * dv);
    lse.insert(lse.end(), other.lse.begin() + k * Rows(), other.lse.begin() + (k + 1) * Rows());
  }
};

// `count` random partials; LSEs spread over [−30, 30] so the weights span many orders of magnitude.
Partials RandomPartials(std::int64_t count, std::uint64_t seed, std::int64_t batch = 2, std::int64_t seqlen = 3,
                        std::int64_t heads = 4, std::int64_t dv = 19) {
  Partials p{batch, seqlen, heads, dv, {}, {}};
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(-30.0f, 30.0f);
  p.O.resize(count * p.Rows() * dv);
  p.lse.resize(count * p.Rows());
  for (float& x : p.O) x = normal(rng);
  for (float& x : p.lse) x = uniform(rng);
  return p;
}

// The merge of `in`'s partials into out->O and out->lse, contiguous float32 of `in`'s shape.
MergeParams ParamsOf(const Partials& in, Partials* out) {
  MergeParams params;
  params.o_partials = in.O.data();
  params.lse_partials = in.lse.data();
  params.o = out->O.data();
  params.lse = out->lse.data();
  params.num_partials = in.Count();
  params.batch = in.batch, params.seqlen = in.seqlen, params.heads = in.heads, params.head_dim_v = in.dv;
  params.set_contiguous_strides();
  return params;
}

// A merged result of `shape`'s sizes, every element `fill`: O (batch, seqlen, heads, dv), LSE (batch, heads,
// seqlen).
Partials Result(const Partials& shape, float fill) {
  return {shape.batch, shape.seqlen, shape.heads, shape.dv, std::vector<float>(shape.Rows() * shape.dv, fill),
          std::vector<float>(shape.Rows(), fill)};
}

// The merged result as float32 O (batch, seqlen, heads, dv) and LSE (batch, heads, seqlen).
Partials Merge(const Partials& in) {
  Partials out = Result(in, 0.0f);
  merge_attention_states(ParamsOf(in, &out));
  return out;
}

// max |a − b| / max |b| over O, and max |a − b| / max(1, |b|) over LSE (−inf must match exactly).
void ExpectClose(const Partials& a, const Partials& b, double tolerance) {
  double max_diff = 0.0, max_ref = 0.0;
  for (std::size_t n = 0; n < a.O.size(); ++n) {
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(a.O[n]) - b.O[n]));
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(b.O[n])));
  }
  EXPECT_LE(max_diff, tolerance * std::max(1.0, max_ref));
  for (std::size_t n = 0; n < a.lse.size(); ++n) {
    if (std::isinf(b.lse[n])) {
      EXPECT_EQ(a.lse[n], b.lse[n]) << "row " << n;
    } else {
      EXPECT_NEAR(a.lse[n], b.lse[n], tolerance * std::max(1.0f, std::fabs(b.lse[n]))) << "row " << n;
    }
  }
}

TEST(Merge, CommutativeWithinRounding) {
  const Partials p = RandomPartials(5, 1);
  const Partials reference = Merge(p);
  for (const std::vector<std::int64_t>& order :
       {std::vector<std::int64_t>{4, 3, 2, 1, 0}, {2, 0, 4, 1, 3}, {1, 3, 0, 4, 2}}) {
    Partials permuted{p.batch, p.seqlen, p.heads, p.dv, {}, {}};
    for (std::int64_t k : order) permuted.Append(p, k);
    ExpectClose(Merge(permuted), reference, 1e-6);
  }
}

TEST(Merge, AssociativeWithinRounding) {
  const Partials p = RandomPartials(3, 2);
  Partials a{p.batch, p.seqlen, p.heads, p.dv, {}, {}}, b = a, c = a, bc = a, ab = a;
  a.Append(p, 0), b.Append(p, 1), c.Append(p, 2);
  ab.Append(p, 0), ab.Append(p, 1);
  bc.Append(p, 1), bc.Append(p, 2);
  Partials ab_then_c = Merge(ab), a_then_bc = a;
  ab_then_c.Append(c, 0);
  a_then_bc.Append(Merge(bc), 0);
  const Partials all_at_once = Merge(p);
  ExpectClose(Merge(ab_then_c), all_at_once, 1e-6);
  ExpectClose(Merge(a_then_bc), all_at_once, 1e-6);
}

TEST(Merge, AgreesWithFloat64ReferenceFold) {
  const Partials p = RandomPartials(7, 3);
  Partials expected = Result(p, 0.0f);
  reference::MergeAttentionStates(ParamsOf(p, &expected));
  ExpectClose(Merge(p), expected, 2e-6);
}

TEST(Merge, NegInfPartialContributesNothing) {
  Partials p = RandomPartials(3, 4);
  const Partials without = Merge(p);
  Partials with_empty = RandomPartials(1, 5);  // finite garbage O under LSE = −inf
  std::fill(with_empty.lse.begin(), with_empty.lse.end(), kNegInf);
  Partials mixed{p.batch, p.seqlen, p.heads, p.dv, {}, {}};
  mixed.Append(p, 0), mixed.Append(with_empty, 0), mixed.Append(p, 1), mixed.Append(p, 2);
  const Partials merged = Merge(mixed);
  // The −inf partial adds e^{−∞} = 0 to the sum and is skipped: the result is bit-identical.
  EXPECT_EQ(std::memcmp(merged.O.data(), without.O.data(), merged.O.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(merged.lse.data(), without.lse.data(), merged.lse.size() * sizeof(float)), 0);
}

TEST(Merge, AllNegInfGivesZerosAndNegInf) {
  Partials p = RandomPartials(4, 6);
  std::fill(p.lse.begin(), p.lse.end(), kNegInf);
  const Partials merged = Merge(p);
  for (float x : merged.O) EXPECT_EQ(x, 0.0f);
  for (float x : merged.lse) EXPECT_EQ(x, kNegInf);
  Partials none = p;
  none.O.clear(), none.lse.clear();  // zero partials: the empty merge, same result
  Partials empty_merge = Result(p, 1.0f);
  MergeParams params = ParamsOf(none, &empty_merge);
  params.o_partials = params.lse_partials = nullptr;  // nothing to read
  merge_attention_states(params);
  for (float x : empty_merge.O) EXPECT_EQ(x, 0.0f);
  for (float x : empty_merge.lse) EXPECT_EQ(x, kNegInf);
}

// A sink is one more partial per row with LSE = s_h and O = 0; a −∞ sink changes no bit; rows whose every
// partial is empty get O = 0 and LSE = s_h.
TEST(Merge, SinksJoinAsOnePartialWithoutValue) {
  Partials p = RandomPartials(3, 11);
  std::fill(p.lse.begin() + p.Rows(), p.lse.begin() + 2 * p.Rows(), kNegInf);  // partial 1 is empty
  const std::vector<float> sinks = {25.0f, kNegInf, -3.0f, 0.5f};
  Partials sink_partial = Result(p, 0.0f);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads; ++h)
      for (std::int64_t i = 0; i < p.seqlen; ++i) sink_partial.lse[(b * p.heads + h) * p.seqlen + i] = sinks[h];
  Partials with_sink_partial = p;
  with_sink_partial.Append(sink_partial, 0);
  Partials joined = Result(p, 0.0f);
  MergeParams params = ParamsOf(p, &joined);
  params.sinks = sinks.data();
  merge_attention_states(params);
  ExpectClose(joined, Merge(with_sink_partial), 1e-6);

  const std::vector<float> none(sinks.size(), kNegInf);
  params.sinks = none.data();
  merge_attention_states(params);
  const Partials without = Merge(p);
  EXPECT_EQ(joined.O, without.O);
  EXPECT_EQ(joined.lse, without.lse);

  std::fill(p.lse.begin(), p.lse.end(), kNegInf);
  params.sinks = sinks.data();
  merge_attention_states(params);
  for (float x : joined.O) EXPECT_EQ(x, 0.0f);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads; ++h)
      for (std::int64_t i = 0; i < p.seqlen; ++i) EXPECT_EQ(joined.lse[(b * p.heads + h) * p.seqlen + i], sinks[h]);
}

TEST(Merge, LargeLseDoesNotOverflow) {
  Partials p = RandomPartials(2, 7, 1, 1, 1, 4);
  p.lse = {1000.0f, 999.0f};  // e^{1000} overflows float; the merge works relative to the max
  const Partials merged = Merge(p);
  const double w0 = 1.0 / (1.0 + std::exp(-1.0)), w1 = 1.0 - w0;
  for (std::int64_t e = 0; e < 4; ++e) EXPECT_NEAR(merged.O[e], w0 * p.O[e] + w1 * p.O[4 + e], 1e-5);
  EXPECT_NEAR(merged.lse[0], 1000.0 + std::log1p(std::exp(-1.0)), 1e-3);
}

// Attention over the union of disjoint key sets equals the merge of attention over each set.
void CheckUnionOfKeySplits(const std::vector<std::int64_t>& cuts, double tolerance) {
  const Shape shape{.batch = 2, .Nq = 5, .Nk = cuts.back(), .Hq = 4, .Hkv = 2, .d = 24, .dv = 20, .dtype = DType::kF32};
  Problem problem(shape, Modifiers{.softcap = 20.0f}, 11);  // softcap acts per score: split-safe
  forward(problem.params(), Algorithm::kOracle);
  const std::int64_t rows = shape.batch * shape.Nq * shape.Hq;
  Partials parts{shape.batch, shape.Nq, shape.Hq, shape.dv, std::vector<float>((cuts.size() - 1) * rows * shape.dv),
                 std::vector<float>((cuts.size() - 1) * rows)};
  for (std::size_t k = 0; k + 1 < cuts.size(); ++k) {  // keys [cuts[k], cuts[k+1])
    AttentionParams part = problem.params();
    part.seqlen_k = cuts[k + 1] - cuts[k];
    part.k = static_cast<const float*>(part.k) + cuts[k] * part.k_strides.seq;
    part.v = static_cast<const float*>(part.v) + cuts[k] * part.v_strides.seq;
    part.o = &parts.O[k * rows * shape.dv];
    part.lse = &parts.lse[k * rows];
    forward(part, Algorithm::kOracle);
  }
  Partials expected{shape.batch, shape.Nq, shape.Hq, shape.dv, std::vector<float>(rows * shape.dv), {}};
  for (std::int64_t b = 0; b < shape.batch; ++b)
    for (std::int64_t i = 0; i < shape.Nq; ++i)
      for (std::int64_t h = 0; h < shape.Hq; ++h) {
        for (std::int64_t e = 0; e < shape.dv; ++e)
          expected.O[((b * shape.Nq + i) * shape.Hq + h) * shape.dv + e] = problem.O(b, i, h, e);
      }
  for (std::int64_t b = 0; b < shape.batch; ++b)
    for (std::int64_t h = 0; h < shape.Hq; ++h)
      for (std::int64_t i = 0; i < shape.Nq; ++i) expected.lse.push_back(problem.Lse(b, h, i));
  ExpectClose(Merge(parts), expected, tolerance);
}

TEST(Merge, TwoKeyHalvesEqualAttentionOverTheUnion) { CheckUnionOfKeySplits({0, 37, 74}, 2e-6); }

TEST(Merge, UnevenKeySetsIncludingAnEmptyOneEqualTheUnion) {
  CheckUnionOfKeySplits({0, 1, 1, 50, 51, 90}, 2e-6);
}

TEST(Merge, WritesReducedPrecisionStridedOutputAndNothingElse) {
  const Partials p = RandomPartials(3, 8, 1, 2, 3, 8);
  const Partials merged = Merge(p);
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    // (batch, seqlen, heads, dv) with a head stride of 10 elements: elements 8 and 9 of each head stay.
    std::vector<std::uint16_t> o(2 * 3 * 10, 0x1234);
    MergeParams params;
    params.o_partials = p.O.data(), params.lse_partials = p.lse.data(), params.o = o.data();
    params.num_partials = 3, params.batch = 1, params.seqlen = 2, params.heads = 3, params.head_dim_v = 8;
    params.dtype = dtype;
    params.o_strides = {60, 30, 10};
    merge_attention_states(params);
    for (std::int64_t row = 0; row < 6; ++row) {
      for (std::int64_t e = 0; e < 8; ++e)
        EXPECT_EQ(LoadAsFloat(o.data(), dtype, row * 10 + e), RoundTo(dtype, merged.O[row * 8 + e]));
      EXPECT_EQ(o[row * 10 + 8], 0x1234);
      EXPECT_EQ(o[row * 10 + 9], 0x1234);
    }
  }
}

TEST(Merge, RejectsBadInputWithoutWriting) {
  Partials p = RandomPartials(2, 9, 1, 1, 2, 4);
  std::vector<float> o(8, 7.0f), lse(2, 7.0f);
  auto params = [&] {
    MergeParams m;
    m.o_partials = p.O.data(), m.lse_partials = p.lse.data(), m.o = o.data(), m.lse = lse.data();
    m.num_partials = 2, m.batch = 1, m.seqlen = 1, m.heads = 2, m.head_dim_v = 4;
    m.set_contiguous_strides();
    return m;
  };
  auto expect_error = [&](MergeParams m, const char* fragment) {
    try {
      merge_attention_states(m);
      ADD_FAILURE() << "no error for " << fragment;
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
    }
    for (float x : o) EXPECT_EQ(x, 7.0f);
    for (float x : lse) EXPECT_EQ(x, 7.0f);
  };
  MergeParams m = params();
  m.num_partials = -1;
  expect_error(m, "num_partials");
  m = params(), m.head_dim_v = 0;
  expect_error(m, "head_dim_v");
  m = params(), m.lse_partials = nullptr;
  expect_error(m, "lse_partials is a null pointer");
  m = params(), m.o = p.O.data();  // output on top of an input
  expect_error(m, "overlaps o_partials");
  const float nan_sinks[2] = {0.0f, std::numeric_limits<float>::quiet_NaN()};
  m = params(), m.sinks = nan_sinks;
  expect_error(m, "sinks must be finite or -inf, got nan at head 1");
  p.lse[3] = std::numeric_limits<float>::quiet_NaN();
  expect_error(params(), "lse_partials must be finite or -inf");
  p.lse[3] = std::numeric_limits<float>::infinity();
  expect_error(params(), "lse_partials must be finite or -inf");
}

}  // namespace
}  // namespace flashattn::testing
