// forward_varlen (include/flashattn/varlen.h): packed sequences, each with its own bottom-right causal
// alignment, against the float64 oracle of each sequence on its own; validation of cu_seqlens.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/element.h"
#include "flashattn/varlen.h"
#include "test_problem.h"

namespace flashattn::testing {
namespace {

struct Packed {
  std::vector<std::int32_t> cu_q, cu_k;
  std::int64_t Hq = 4, Hkv = 2, d = 24, dv = 20;
  DType dtype = DType::kF32;
  std::vector<float> q, k, v;  // float32 values, exactly representable in dtype
  std::vector<std::uint16_t> q_raw, k_raw, v_raw, o_raw;  // the dtype storage (two slots per float32)
  std::vector<float> lse;
  std::vector<float> alibi;
  std::int64_t TotalQ() const { return cu_q.back(); }
  std::int64_t TotalK() const { return cu_k.back(); }
  std::int64_t Batch() const { return static_cast<std::int64_t>(cu_q.size()) - 1; }
};

Packed MakePacked(std::vector<std::int32_t> cu_q, std::vector<std::int32_t> cu_k, DType dtype, std::uint64_t seed) {
  Packed p;
  p.cu_q = std::move(cu_q), p.cu_k = std::move(cu_k), p.dtype = dtype;
  const std::int64_t slots = dtype == DType::kF32 ? 2 : 1;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto fill = [&](std::vector<float>& values, std::vector<std::uint16_t>& raw, std::int64_t n) {
    values.resize(n);
    raw.resize(std::max<std::int64_t>(1, n * slots));
    for (std::int64_t i = 0; i < n; ++i) {
      values[i] = RoundTo(dtype, normal(rng));
      StoreFromFloat(raw.data(), dtype, i, values[i]);
    }
  };
  fill(p.q, p.q_raw, p.TotalQ() * p.Hq * p.d);
  fill(p.k, p.k_raw, p.TotalK() * p.Hkv * p.d);
  fill(p.v, p.v_raw, p.TotalK() * p.Hkv * p.dv);
  p.o_raw.assign(std::max<std::int64_t>(1, p.TotalQ() * p.Hq * p.dv * slots), 0x7e00);
  p.lse.assign(std::max<std::int64_t>(1, p.Hq * p.TotalQ()), std::numeric_limits<float>::quiet_NaN());
  for (std::int64_t n = 0; n < p.Batch() * p.Hq; ++n) p.alibi.push_back(0.1f + 0.05f * n);
  return p;
}

VarlenParams Params(Packed& p, bool causal, bool alibi) {
  VarlenParams v;
  v.heads_q = p.Hq, v.heads_kv = p.Hkv, v.head_dim = p.d, v.head_dim_v = p.dv;
  v.dtype = p.dtype, v.causal = causal;
  if (alibi) v.alibi_slopes = p.alibi.data(), v.alibi_batch_stride = p.Hq;
  v.q = p.q_raw.data(), v.k = p.k_raw.data(), v.v = p.v_raw.data(), v.o = p.o_raw.data(), v.lse = p.lse.data();
  SetPackedSequences(p.cu_q, p.cu_k, &v);
  return v;
}

// Plain float64 attention of packed row t (sequence b, head h), aligned within its own sequence:
// row i = t − cu_q[b] sees key j iff j ≤ i + Nk − Nq (causal); ALiBi −slope·|i + Nk − Nq − j|.
double OracleRow(const Packed& p, bool causal, bool alibi, std::int64_t b, std::int64_t t, std::int64_t h,
                 std::vector<double>& o) {
  const std::int64_t Nq = p.cu_q[b + 1] - p.cu_q[b], Nk = p.cu_k[b + 1] - p.cu_k[b], i = t - p.cu_q[b];
  const std::int64_t hk = h / (p.Hq / p.Hkv);
  std::vector<double> S(Nk, -std::numeric_limits<double>::infinity());
  double m = -std::numeric_limits<double>::infinity();
  for (std::int64_t j = 0; j < Nk; ++j) {
    if (causal && j > i + Nk - Nq) continue;
    double dot = 0.0;
    for (std::int64_t e = 0; e < p.d; ++e)
      dot += double(p.q[(t * p.Hq + h) * p.d + e]) * p.k[((p.cu_k[b] + j) * p.Hkv + hk) * p.d + e];
    S[j] = dot / std::sqrt(double(p.d));
    if (alibi) S[j] -= p.alibi[b * p.Hq + h] * std::fabs(double(i + Nk - Nq - j));
    m = std::max(m, S[j]);
  }
  o.assign(p.dv, 0.0);
  if (m == -std::numeric_limits<double>::infinity()) return m;
  double l = 0.0;
  for (double s : S) l += std::exp(s - m);
  for (std::int64_t j = 0; j < Nk; ++j)
    for (std::int64_t e = 0; e < p.dv; ++e)
      o[e] += std::exp(S[j] - m) / l * p.v[((p.cu_k[b] + j) * p.Hkv + hk) * p.dv + e];
  return m + std::log(l);
}

void CheckAgainstOracle(Packed& p, bool causal, bool alibi, double tolerance, double lse_tolerance = 1e-5) {
  std::vector<double> o;
  double max_diff = 0.0, max_ref = 0.0;
  for (std::int64_t b = 0; b < p.Batch(); ++b)
    for (std::int64_t t = p.cu_q[b]; t < p.cu_q[b + 1]; ++t)
      for (std::int64_t h = 0; h < p.Hq; ++h) {
        const double lse = OracleRow(p, causal, alibi, b, t, h, o);
        const float got_lse = p.lse[h * p.TotalQ() + t];  // packed (Hq, total_q)
        if (std::isinf(lse)) EXPECT_EQ(got_lse, lse) << "row " << t << " head " << h;
        else EXPECT_NEAR(got_lse, lse, lse_tolerance * std::max(1.0, std::fabs(lse))) << "row " << t << " head " << h;
        for (std::int64_t e = 0; e < p.dv; ++e) {
          const double got = LoadAsFloat(p.o_raw.data(), p.dtype, (t * p.Hq + h) * p.dv + e);
          max_diff = std::isnan(got) ? INFINITY : std::max(max_diff, std::fabs(got - o[e]));
          max_ref = std::max(max_ref, std::fabs(o[e]));
        }
      }
  EXPECT_LE(max_diff / std::max(1e-30, max_ref), tolerance);
}

TEST(Varlen, EachSequenceAlignsItsOwnCausalMask) {
  // Lengths (Nq, Nk): (3, 7), (5, 2) — the first rows of that one see no key —, (0, 4), (1, 1), (6, 6).
  for (bool causal : {false, true})
    for (bool alibi : {false, true}) {
      Packed p = MakePacked({0, 3, 8, 8, 9, 15}, {0, 7, 9, 13, 14, 20}, DType::kF32, 3);
      forward_varlen(Params(p, causal, alibi));
      CheckAgainstOracle(p, causal, alibi, 2e-5);
    }
}

TEST(Varlen, EveryAlgorithmAndReducedPrecision) {
  for (Algorithm algorithm : kAllAlgorithms) {
    SCOPED_TRACE(std::string(to_string(algorithm)));
    Packed p = MakePacked({0, 4, 4, 11}, {0, 9, 12, 12}, DType::kBF16, 4);
    forward_varlen(Params(p, true, false), algorithm);
    // `standard` materializes S in bfloat16, which moves its LSE by up to a bfloat16 rounding of S.
    CheckAgainstOracle(p, true, false, 1.6e-2, 8e-3);
  }
}

TEST(Varlen, RejectsBadCuSeqlensWithoutWriting) {
  struct Bad {
    std::vector<std::int32_t> cu_q, cu_k;
    const char* message;
  };
  const Bad bad_inputs[] = {
      {{0, 5, 3, 9}, {0, 2, 4, 6}, "cu_seqlens_q must be non-decreasing, got cu_seqlens_q[1]=5 > cu_seqlens_q[2]=3"},
      {{0, 3, 5, 9}, {0, 2, 4, 5}, "cu_seqlens_k must end at the packed length 6, got cu_seqlens_k[3]=5"},
      {{1, 3, 5, 9}, {0, 2, 4, 6}, "cu_seqlens_q[0] must be 0, got 1"},
  };
  for (const Bad& bad : bad_inputs) {
    Packed p = MakePacked({0, 3, 5, 9}, {0, 2, 4, 6}, DType::kF16, 5);
    const std::vector<std::uint16_t> o_before = p.o_raw;
    VarlenParams params = Params(p, true, false);
    p.cu_q = bad.cu_q, p.cu_k = bad.cu_k;
    params.cu_seqlens_q = p.cu_q.data(), params.cu_seqlens_k = p.cu_k.data();
    try {
      forward_varlen(params);
      ADD_FAILURE() << "no error for " << bad.message;
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(bad.message), std::string::npos) << error.what();
    }
    EXPECT_EQ(p.o_raw, o_before);
  }
  Packed p = MakePacked({0, 3, 5, 9}, {0, 2, 4, 6}, DType::kF16, 5);
  VarlenParams params = Params(p, true, false);
  params.max_seqlen_q = 3;  // sequence 2 has 4 queries
  EXPECT_THROW(forward_varlen(params), Error);
}

}  // namespace
}  // namespace flashattn::testing
