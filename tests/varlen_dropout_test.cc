// Dropout in the variable-length calls: sequence b of forward_varlen, backward_varlen and the varlen
// materialize_dropout_mask is, bit for bit, the batch-1 problem of its own rows (copied into tensors of its
// own) at dropout_offset + b; a bad keep buffer is rejected before anything is written.
#include <algorithm>
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

namespace flashattn::testing {
namespace {

constexpr std::int64_t kHq = 4, kHkv = 2, kD = 24, kDv = 20;
constexpr float kDropout = 0.3f;
constexpr std::uint64_t kSeed = 42, kOffset = 5;

// float32 packed tensors (total, heads, dim), their gradients and the sequence boundaries. Lengths (Nq, Nk):
// (3, 7), (5, 2), (0, 4), (1, 1), (6, 6), (5, 2) — the last a second sequence of the second one's shape.
struct Packed {
  std::vector<std::int32_t> cu_q = {0, 3, 8, 8, 9, 15, 20}, cu_k = {0, 7, 9, 13, 14, 20, 22};
  std::vector<float> q, k, v, o, lse, d_o, dq, dk, dv;
  std::int64_t TotalQ() const { return cu_q.back(); }
  std::int64_t TotalK() const { return cu_k.back(); }
  std::int64_t Batch() const { return static_cast<std::int64_t>(cu_q.size()) - 1; }
  std::int64_t Nq(std::int64_t b) const { return cu_q[b + 1] - cu_q[b]; }
  std::int64_t Nk(std::int64_t b) const { return cu_k[b + 1] - cu_k[b]; }
};

Packed MakePacked() {
  Packed p;
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto fill = [&](std::vector<float>& x, std::int64_t n) {
    x.resize(n);
    for (float& e : x) e = normal(rng);
  };
  fill(p.q, p.TotalQ() * kHq * kD), fill(p.k, p.TotalK() * kHkv * kD), fill(p.v, p.TotalK() * kHkv * kDv);
  fill(p.d_o, p.TotalQ() * kHq * kDv);
  p.o.assign(p.TotalQ() * kHq * kDv, std::numeric_limits<float>::quiet_NaN());
  p.lse.assign(kHq * p.TotalQ(), std::numeric_limits<float>::quiet_NaN());
  p.dq.assign(p.q.size(), 0.0f), p.dk.assign(p.k.size(), 0.0f), p.dv.assign(p.v.size(), 0.0f);
  return p;
}

void SetSettings(AttentionSettings* s) {
  s->heads_q = kHq, s->heads_kv = kHkv, s->head_dim = kD, s->head_dim_v = kDv;
  s->causal = true;
  s->dropout_p = kDropout, s->dropout_seed = kSeed, s->dropout_offset = kOffset;
}

VarlenBackwardParams Params(Packed& p) {
  VarlenBackwardParams x;
  VarlenParams& f = x.forward;
  SetSettings(&f);
  f.q = p.q.data(), f.k = p.k.data(), f.v = p.v.data(), f.o = p.o.data(), f.lse = p.lse.data();
  f.total_q = p.TotalQ(), f.total_k = p.TotalK(), f.batch = p.Batch();
  f.cu_seqlens_q = p.cu_q.data(), f.cu_seqlens_k = p.cu_k.data();
  f.max_seqlen_q = 6, f.max_seqlen_k = 7;
  x.d_o = p.d_o.data(), x.dq = p.dq.data(), x.dk = p.dk.data(), x.dv = p.dv.data();
  return x;
}

// Rows [r0, r1) of a packed (total, heads, dim) tensor as a tensor of its own.
std::vector<float> Rows(const std::vector<float>& x, std::int64_t r0, std::int64_t r1, std::int64_t width) {
  return {x.begin() + r0 * width, x.begin() + r1 * width};
}

// Sequence b as a batch-1 problem over copies of its rows: forward, its dropout mask and backward.
struct Sequence {
  std::vector<float> q, k, v, o, lse, d_o, dq, dk, dv;
  std::vector<std::uint8_t> keep;
  BackwardParams params;

  Sequence(const Packed& p, std::int64_t b) {
    const std::int64_t q0 = p.cu_q[b], q1 = p.cu_q[b + 1], k0 = p.cu_k[b], k1 = p.cu_k[b + 1];
    q = Rows(p.q, q0, q1, kHq * kD), k = Rows(p.k, k0, k1, kHkv * kD), v = Rows(p.v, k0, k1, kHkv * kDv);
    d_o = Rows(p.d_o, q0, q1, kHq * kDv);
    o.resize(d_o.size()), lse.resize(std::max<std::int64_t>(1, kHq * (q1 - q0)));
    dq.resize(q.size()), dk.resize(k.size()), dv.resize(v.size());
    keep.resize(std::max<std::int64_t>(1, kHq * (q1 - q0) * (k1 - k0)));
    AttentionParams& a = params.attention;
    SetSettings(&a);
    a.dropout_offset = kOffset + static_cast<std::uint64_t>(b);
    a.batch = 1, a.seqlen_q = q1 - q0, a.seqlen_k = k1 - k0;
    a.q = q.data(), a.k = k.data(), a.v = v.data(), a.o = o.data(), a.lse = lse.data();
    params.d_o = d_o.data(), params.dq = dq.data(), params.dk = dk.data(), params.dv = dv.data();
    params.set_contiguous_strides();
    forward(a);
    materialize_dropout_mask(a, keep.data());
    backward(params);
  }
};

TEST(VarlenDropout, EachSequenceIsItsBatchOneProblemAtOffsetPlusIndex) {
  Packed p = MakePacked();
  VarlenBackwardParams x = Params(p);
  forward_varlen(x.forward);
  std::vector<std::uint8_t> keep(kHq * (3 * 7 + 5 * 2 + 0 + 1 * 1 + 6 * 6 + 5 * 2), 9);
  materialize_dropout_mask(x.forward, keep.data());
  backward_varlen(x);

  std::int64_t mask_start = 0;
  for (std::int64_t b = 0; b < p.Batch(); ++b) {
    SCOPED_TRACE("sequence " + std::to_string(b));
    const Sequence s(p, b);
    const std::int64_t q0 = p.cu_q[b], k0 = p.cu_k[b], Nq = p.Nq(b);
    EXPECT_EQ(s.o, Rows(p.o, q0, q0 + Nq, kHq * kDv));
    for (std::int64_t h = 0; h < kHq; ++h)
      for (std::int64_t i = 0; i < Nq; ++i) ASSERT_EQ(s.lse[h * Nq + i], p.lse[h * p.TotalQ() + q0 + i]);
    const std::int64_t mask_size = kHq * Nq * p.Nk(b);
    EXPECT_TRUE(std::equal(keep.begin() + mask_start, keep.begin() + mask_start + mask_size, s.keep.begin()));
    mask_start += mask_size;
    EXPECT_EQ(s.dq, Rows(p.dq, q0, q0 + Nq, kHq * kD));
    EXPECT_EQ(s.dk, Rows(p.dk, k0, k0 + p.Nk(b), kHkv * kD));
    EXPECT_EQ(s.dv, Rows(p.dv, k0, k0 + p.Nk(b), kHkv * kDv));
  }
  // Dropout took place, and sequences 1 and 5 (same shape) drew different masks from their own streams.
  EXPECT_NE(std::count(keep.begin(), keep.end(), 0), 0);
  const std::int64_t second = kHq * 3 * 7, last = static_cast<std::int64_t>(keep.size()) - kHq * 5 * 2;
  EXPECT_FALSE(std::equal(keep.begin() + second, keep.begin() + second + kHq * 5 * 2, keep.begin() + last));
}

TEST(VarlenDropout, BadKeepBufferIsRejectedWithoutWriting) {
  Packed p = MakePacked();
  const VarlenParams params = Params(p).forward;
  const std::vector<float> o_before = p.o, q_before = p.q;
  struct Case {
    const char* label;
    std::uint8_t* keep;
    const char* message;
  };
  std::vector<std::uint8_t> cu_bytes(sizeof(std::int32_t) * p.cu_q.size());
  std::memcpy(cu_bytes.data(), p.cu_q.data(), cu_bytes.size());
  const Case cases[] = {
      {"null keep", nullptr, "keep is a null pointer but holds 312 elements"},
      {"keep on q", reinterpret_cast<std::uint8_t*>(p.q.data()), "keep overlaps q"},
      {"keep on o", reinterpret_cast<std::uint8_t*>(p.o.data() + 8), "keep overlaps o"},
      {"keep on cu_seqlens_q", reinterpret_cast<std::uint8_t*>(p.cu_q.data()), "keep overlaps cu_seqlens_q"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    try {
      materialize_dropout_mask(params, c.keep);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
    }
    EXPECT_EQ(std::memcmp(p.q.data(), q_before.data(), sizeof(float) * q_before.size()), 0);
    EXPECT_EQ(std::memcmp(p.o.data(), o_before.data(), sizeof(float) * o_before.size()), 0);  // NaN-safe
    EXPECT_EQ(std::memcmp(p.cu_q.data(), cu_bytes.data(), cu_bytes.size()), 0);
  }
}

}  // namespace
}  // namespace flashattn::testing
