// backward_varlen (include/flashattn/backward.h): packed sequences of different lengths, each differentiated
// with its own causal alignment, against the float64 oracle backward of each sequence copied into tensors
// of its own; validation of the packed call. And dropout in every varlen call: sequence b of forward_varlen,
// backward_varlen and the varlen materialize_dropout_mask is, bit for bit, the batch-1 problem of its own
// rows at dropout_offset + b; a bad keep buffer is rejected before anything is written.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "flashattn/backward.h"
#include "flashattn/forward.h"
#include "flashattn/varlen.h"
#include "test_problem.h"

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
  std::int64_t Nq(std::int64_t b) const { return cu_q[b + 1] - cu_q[b]; }
  std::int64_t Nk(std::int64_t b) const { return cu_k[b + 1] - cu_k[b]; }
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
  SetPackedSequences(p.cu_q, p.cu_k, &f);
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

// Sequence b of a packed call as the batch-1 problem of copies of its rows: the call's settings, its ALiBi
// row, dropout at offset dropout_offset + b.
struct Sequence {
  std::vector<float> q, k, v, o, lse, d_o, dq, dk, dv;
  BackwardParams params;

  Sequence(const Packed& p, const VarlenParams& call, std::int64_t b) {
    const std::int64_t q0 = p.cu_q[b], q1 = p.cu_q[b + 1], k0 = p.cu_k[b], k1 = p.cu_k[b + 1];
    q = Rows(p.q, q0, q1, kHq * kD), k = Rows(p.k, k0, k1, kHkv * kD), v = Rows(p.v, k0, k1, kHkv * kDv);
    d_o = Rows(p.d_o, q0, q1, kHq * kDv);
    o.resize(d_o.size()), lse.resize(std::max<std::int64_t>(1, kHq * (q1 - q0)));
    dq.resize(q.size()), dk.resize(k.size()), dv.resize(v.size());
    AttentionParams& a = params.attention;
    static_cast<AttentionSettings&>(a) = call;
    if (call.alibi_slopes != nullptr) a.alibi_slopes = call.alibi_slopes + b * call.alibi_batch_stride;
    a.alibi_batch_stride = 0;
    a.dropout_offset = call.dropout_offset + static_cast<std::uint64_t>(b);
    a.batch = 1, a.seqlen_q = q1 - q0, a.seqlen_k = k1 - k0;
    a.q = q.data(), a.k = k.data(), a.v = v.data(), a.o = o.data(), a.lse = lse.data();
    params.d_o = d_o.data(), params.dq = dq.data(), params.dk = dk.data(), params.dv = dv.data();
    params.set_contiguous_strides();
  }
};

// The oracle gradients of every sequence, each computed on copies of its rows, placed at the packed rows.
struct Gradients {
  std::vector<float> dq, dk, dv;
};
Gradients OracleBySequence(const Packed& p, const VarlenParams& call) {
  Gradients g{std::vector<float>(p.dq.size()), std::vector<float>(p.dk.size()), std::vector<float>(p.dv.size())};
  for (std::int64_t b = 0; b < p.Batch(); ++b) {
    Sequence s(p, call, b);
    backward(s.params, BackwardAlgorithm::kOracle);
    std::copy(s.dq.begin(), s.dq.end(), g.dq.begin() + p.cu_q[b] * kHq * kD);
    std::copy(s.dk.begin(), s.dk.end(), g.dk.begin() + p.cu_k[b] * kHkv * kD);
    std::copy(s.dv.begin(), s.dv.end(), g.dv.begin() + p.cu_k[b] * kHkv * kDv);
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
      const Gradients oracle = OracleBySequence(p, x.forward);
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

// Lengths (Nq, Nk): (3, 7), (5, 2), (0, 4), (1, 1), (6, 6), and (5, 2) again, a second sequence of the
// second one's shape.
Packed DropoutPacked() { return MakePacked({0, 3, 8, 8, 9, 15, 20}, {0, 7, 9, 13, 14, 20, 22}, 7); }

VarlenBackwardParams DropoutParams(Packed& p) {
  VarlenBackwardParams x = Params(p, true, true);
  x.forward.dropout_p = 0.3f, x.forward.dropout_seed = 42, x.forward.dropout_offset = 5;
  return x;
}

TEST(VarlenDropout, EachSequenceIsItsBatchOneProblemAtOffsetPlusIndex) {
  Packed p = DropoutPacked();
  VarlenBackwardParams x = DropoutParams(p);
  forward_varlen(x.forward);
  std::vector<std::uint8_t> keep(kHq * (3 * 7 + 5 * 2 + 0 * 4 + 1 * 1 + 6 * 6 + 5 * 2), 9);
  materialize_dropout_mask(x.forward, keep.data());
  backward_varlen(x);

  std::int64_t mask_start = 0;
  for (std::int64_t b = 0; b < p.Batch(); ++b) {
    SCOPED_TRACE("sequence " + std::to_string(b));
    Sequence s(p, x.forward, b);
    std::vector<std::uint8_t> sequence_keep(std::max<std::int64_t>(1, kHq * p.Nq(b) * p.Nk(b)));
    forward(s.params.attention);
    materialize_dropout_mask(s.params.attention, sequence_keep.data());
    backward(s.params);
    const std::int64_t q0 = p.cu_q[b], k0 = p.cu_k[b], Nq = p.Nq(b), Nk = p.Nk(b);
    EXPECT_EQ(s.o, Rows(p.o, q0, q0 + Nq, kHq * kDv));
    for (std::int64_t h = 0; h < kHq; ++h)
      for (std::int64_t i = 0; i < Nq; ++i) ASSERT_EQ(s.lse[h * Nq + i], p.lse[h * p.TotalQ() + q0 + i]);
    EXPECT_TRUE(std::equal(keep.begin() + mask_start, keep.begin() + mask_start + kHq * Nq * Nk,
                           sequence_keep.begin()));
    mask_start += kHq * Nq * Nk;
    EXPECT_EQ(s.dq, Rows(p.dq, q0, q0 + Nq, kHq * kD));
    EXPECT_EQ(s.dk, Rows(p.dk, k0, k0 + Nk, kHkv * kD));
    EXPECT_EQ(s.dv, Rows(p.dv, k0, k0 + Nk, kHkv * kDv));
  }
  // Dropout took place, and sequences 1 and 5 (same shape) drew different masks from their own streams.
  EXPECT_NE(std::count(keep.begin(), keep.end(), 0), 0);
  const auto second = keep.begin() + kHq * 3 * 7, last = keep.end() - kHq * 5 * 2;
  EXPECT_FALSE(std::equal(second, second + kHq * 5 * 2, last));
}

TEST(VarlenDropout, BadKeepBufferIsRejectedWithoutWriting) {
  Packed p = DropoutPacked();
  const VarlenParams params = DropoutParams(p).forward;
  const Packed before = p;
  struct Case {
    const char* label;
    void* keep;
    const char* message;
  };
  const Case cases[] = {
      {"null keep", nullptr, "keep is a null pointer but holds 312 elements"},
      {"keep on q", p.q.data(), "keep overlaps q"},
      {"keep on o", p.o.data() + 8, "keep overlaps o"},
      {"keep on cu_seqlens_q", p.cu_q.data(), "keep overlaps cu_seqlens_q"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    try {
      materialize_dropout_mask(params, static_cast<std::uint8_t*>(c.keep));
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
    }
    EXPECT_EQ(p.q, before.q);
    EXPECT_EQ(p.o, before.o);
    EXPECT_EQ(p.cu_q, before.cu_q);
  }
}

}  // namespace
}  // namespace flashattn::testing
