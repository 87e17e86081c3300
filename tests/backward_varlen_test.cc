// backward_varlen (include/flashattn/backward.h): packed sequences of different lengths, each differentiated
// with its own causal alignment, against the float64 oracle backward of each sequence copied into tensors
// of its own; validation of the packed call.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "flashattn/backward.h"

namespace flashattn::testing {
namespace {

constexpr std::int64_t kHq = 4, kHkv = 2, kD = 24, kDv = 20;

// float32 packed tensors (total, heads, dim) and their gradients.
struct Packed {
  std::vector<std::int32_t> cu_q, cu_k;
  std::vector<float> q, k, v, o, lse, d_o, dq, dk, dv, alibi;
  std::int64_t TotalQ() const { return cu_q.back(); }
  std::int64_t TotalK() const { return cu_k.back(); }
  std::int64_t Batch() const { return static_cast<std::int64_t>(cu_q.size()) - 1; }
};

Packed MakePacked(std::vector<std::int32_t> cu_q, std::vector<std::int32_t> cu_k, std::uint64_t seed) {
  Packed p;
  p.cu_q = std::move(cu_q), p.cu_k = std::move(cu_k);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto fill = [&](std::vector<float>& x, std::int64_t n) {
    x.resize(n);
    for (float& e : x) e = normal(rng);
  };
  fill(p.q, p.TotalQ() * kHq * kD), fill(p.k, p.TotalK() * kHkv * kD), fill(p.v, p.TotalK() * kHkv * kDv);
  fill(p.d_o, p.TotalQ() * kHq * kDv);
  p.o.assign(p.TotalQ() * kHq * kDv, 0.0f), p.lse.assign(kHq * p.TotalQ(), 0.0f);
  for (std::int64_t n = 0; n < p.Batch() * kHq; ++n) p.alibi.push_back(0.1f + 0.05f * n);
  return p;
}

VarlenBackwardParams Params(Packed& p, bool causal, bool alibi) {
  VarlenBackwardParams x;
  VarlenParams& f = x.forward;
  f.heads_q = kHq, f.heads_kv = kHkv, f.head_dim = kD, f.head_dim_v = kDv;
  f.causal = causal;
  if (alibi) f.alibi_slopes = p.alibi.data(), f.alibi_batch_stride = kHq;
  f.q = p.q.data(), f.k = p.k.data(), f.v = p.v.data(), f.o = p.o.data(), f.lse = p.lse.data();
  f.total_q = p.TotalQ(), f.total_k = p.TotalK(), f.batch = p.Batch();
  f.cu_seqlens_q = p.cu_q.data(), f.cu_seqlens_k = p.cu_k.data();
  for (std::int64_t b = 0; b < p.Batch(); ++b) {
    f.max_seqlen_q = std::max<std::int64_t>(f.max_seqlen_q, p.cu_q[b + 1] - p.cu_q[b]);
    f.max_seqlen_k = std::max<std::int64_t>(f.max_seqlen_k, p.cu_k[b + 1] - p.cu_k[b]);
  }
  p.dq.assign(p.q.size(), std::numeric_limits<float>::quiet_NaN());
  p.dk.assign(p.k.size(), std::numeric_limits<float>::quiet_NaN());
  p.dv.assign(p.v.size(), std::numeric_limits<float>::quiet_NaN());
  x.d_o = p.d_o.data(), x.dq = p.dq.data(), x.dk = p.dk.data(), x.dv = p.dv.data();
  return x;
}

// Rows [r0, r1) of a packed (total, heads, dim) tensor as a tensor of its own.
std::vector<float> Rows(const std::vector<float>& x, std::int64_t r0, std::int64_t r1, std::int64_t width) {
  return {x.begin() + r0 * width, x.begin() + r1 * width};
}

// The oracle gradients of every sequence, each computed on copies of its rows, placed at the packed rows.
struct Gradients {
  std::vector<float> dq, dk, dv;
};
Gradients OracleBySequence(const Packed& p, bool causal, bool alibi) {
  Gradients g{std::vector<float>(p.dq.size()), std::vector<float>(p.dk.size()), std::vector<float>(p.dv.size())};
  for (std::int64_t b = 0; b < p.Batch(); ++b) {
    const std::int64_t q0 = p.cu_q[b], q1 = p.cu_q[b + 1], k0 = p.cu_k[b], k1 = p.cu_k[b + 1];
    std::vector<float> q = Rows(p.q, q0, q1, kHq * kD), k = Rows(p.k, k0, k1, kHkv * kD);
    std::vector<float> v = Rows(p.v, k0, k1, kHkv * kDv), d_o = Rows(p.d_o, q0, q1, kHq * kDv);
    std::vector<float> o(d_o.size()), lse(std::max<std::int64_t>(1, kHq * (q1 - q0)));
    std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
    BackwardParams x;
    AttentionParams& a = x.attention;
    a.batch = 1, a.heads_q = kHq, a.heads_kv = kHkv, a.seqlen_q = q1 - q0, a.seqlen_k = k1 - k0;
    a.head_dim = kD, a.head_dim_v = kDv, a.causal = causal;
    if (alibi) a.alibi_slopes = p.alibi.data() + b * kHq;
    a.q = q.data(), a.k = k.data(), a.v = v.data(), a.o = o.data(), a.lse = lse.data();
    x.d_o = d_o.data(), x.dq = dq.data(), x.dk = dk.data(), x.dv = dv.data();
    x.set_contiguous_strides();
    backward(x, BackwardAlgorithm::kOracle);
    std::copy(dq.begin(), dq.end(), g.dq.begin() + q0 * kHq * kD);
    std::copy(dk.begin(), dk.end(), g.dk.begin() + k0 * kHkv * kD);
    std::copy(dv.begin(), dv.end(), g.dv.begin() + k0 * kHkv * kDv);
  }
  return g;
}

// max |x − ref| / max |ref| (infinite on NaN).
double RelativeError(const std::vector<float>& x, const std::vector<float>& ref) {
  double diff = 0.0, scale = 1e-30;
  for (std::size_t n = 0; n < x.size(); ++n) {
    diff = std::isnan(x[n]) ? INFINITY : std::max(diff, std::fabs(double(x[n]) - ref[n]));
    scale = std::max(scale, std::fabs(double(ref[n])));
  }
  return diff / scale;
}

TEST(BackwardVarlen, EachSequenceMatchesItsOwnOracleWithinTwiceStandard) {
  // (Nq, Nk) per sequence: (3, 7), (5, 2) — under causal its first rows see no key —, (0, 4): a sequence
  // without queries, whose dK and dV must be zero, (1, 1), (6, 6).
  for (bool causal : {false, true})
    for (bool alibi : {false, true}) {
      SCOPED_TRACE(std::string("causal ") + (causal ? "on" : "off") + ", alibi " + (alibi ? "on" : "off"));
      Packed p = MakePacked({0, 3, 8, 8, 9, 15}, {0, 7, 9, 13, 14, 20}, 5);
      VarlenBackwardParams x = Params(p, causal, alibi);
      forward_varlen(x.forward);
      const Gradients oracle = OracleBySequence(p, causal, alibi);
      backward_varlen(x, BackwardAlgorithm::kStandard);
      const double standard[] = {RelativeError(p.dq, oracle.dq), RelativeError(p.dk, oracle.dk),
                                 RelativeError(p.dv, oracle.dv)};
      x = Params(p, causal, alibi);
      backward_varlen(x);
      EXPECT_LE(RelativeError(p.dq, oracle.dq), 2 * standard[0] + 1e-6);
      EXPECT_LE(RelativeError(p.dk, oracle.dk), 2 * standard[1] + 1e-6);
      EXPECT_LE(RelativeError(p.dv, oracle.dv), 2 * standard[2] + 1e-6);
      for (std::int64_t n = 9 * kHkv * kD; n < 13 * kHkv * kD; ++n) ASSERT_EQ(p.dk[n], 0.0f) << n;
      for (std::int64_t n = 9 * kHkv * kDv; n < 13 * kHkv * kDv; ++n) ASSERT_EQ(p.dv[n], 0.0f) << n;
    }
}

TEST(BackwardVarlen, RejectsBadInputWithoutWritingGradients) {
  Packed p = MakePacked({0, 3, 8}, {0, 7, 9}, 6);
  VarlenBackwardParams good = Params(p, true, false);
  forward_varlen(good.forward);
  struct Case {
    std::string label, message;
    void (*spoil)(VarlenBackwardParams&, Packed&);
  };
  static std::vector<std::int32_t> decreasing = {0, 5, 3};
  const Case cases[] = {
      {"null dq", "dq is a null pointer", [](VarlenBackwardParams& x, Packed&) { x.dq = nullptr; }},
      {"null lse", "forward.lse is required by backward_varlen",
       [](VarlenBackwardParams& x, Packed&) { x.forward.lse = nullptr; }},
      {"decreasing cu_seqlens_q", "cu_seqlens_q must be non-decreasing",
       [](VarlenBackwardParams& x, Packed&) { x.forward.cu_seqlens_q = decreasing.data(); }},
      {"dk overlapping k", "dk overlaps forward.k", [](VarlenBackwardParams& x, Packed& p) { x.dk = p.k.data(); }},
      {"dropout_p above 1", "dropout_p must be in [0, 1), got 1.5",
       [](VarlenBackwardParams& x, Packed&) { x.forward.dropout_p = 1.5f; }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    VarlenBackwardParams x = Params(p, true, false);
    const std::vector<float> k_before = p.k, dq_before(p.dq.size(), 7.0f);
    std::fill(p.dq.begin(), p.dq.end(), 7.0f), std::fill(p.dv.begin(), p.dv.end(), 7.0f);
    c.spoil(x, p);
    try {
      backward_varlen(x);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
    }
    EXPECT_EQ(p.dq, dq_before);
    EXPECT_EQ(p.k, k_before);
    for (float e : p.dv) ASSERT_EQ(e, 7.0f);
  }
}

}  // namespace
}  // namespace flashattn::testing
