#include "bench/decode_baseline.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "bench/baseline_softmax.h"
#include "support/fail.h"

namespace flashattn::bench {

DecodeBaselineProblem BaselineProblemOf(const DecodeParams& p, std::int64_t cache_seqlen_max) {
  DecodeBaselineProblem problem;
  problem.cache_seqlens = p.cache_seqlens;
  problem.batch = p.batch, problem.seqlen_q = p.seqlen_q, problem.heads_q = p.heads_q;
  problem.heads_kv = p.heads_kv, problem.head_dim = p.head_dim, problem.cache_seqlen_max = cache_seqlen_max;
  problem.causal = p.causal;
  problem.num_threads = p.num_threads;
  return problem;
}

BlasDecodeBaseline::BlasDecodeBaseline(const DecodeBaselineProblem& problem, BaselineArrangement arrangement)
    : p_(problem), arrangement_(arrangement) {
  const DecodeBaselineProblem& p = p_;
  if (p.batch < 1 || p.seqlen_q < 1 || p.heads_kv < 1 || p.heads_q % p.heads_kv != 0 || p.head_dim < 1)
    support::Fail("decode baseline: bad shape batch ", p.batch, ", Nq ", p.seqlen_q, ", Hq ", p.heads_q, ", Hkv ",
         p.heads_kv, ", d ", p.head_dim);
  if (p.num_threads < 1) support::Fail("decode baseline: num_threads must be >= 1, got ", p.num_threads);
  for (std::int64_t b = 0; b < p.batch; ++b)
    if (p.cache_seqlens[b] < 0 || p.cache_seqlens[b] > p.cache_seqlen_max)
      support::Fail("decode baseline: cache_seqlens[", b, "] = ", p.cache_seqlens[b], " outside [0, ",
           p.cache_seqlen_max, "]");
  scale_ = 1.0f / std::sqrt(static_cast<float>(p.head_dim));
  const std::int64_t G = p.heads_q / p.heads_kv;
  const int workers = ArrangementWorkers(arrangement_, p_.num_threads, p_.batch * p_.heads_kv);
  scratch_.assign(static_cast<std::size_t>(workers),
                  std::vector<float>(static_cast<std::size_t>(G * p.cache_seqlen_max)));
}

std::int64_t BlasDecodeBaseline::ScratchBytes(const DecodeBaselineProblem& p,
                                              BaselineArrangement arrangement) {
  const std::int64_t workers = ArrangementWorkers(arrangement, std::max(p.num_threads, 1), p.batch * p.heads_kv);
  return workers * (p.heads_q / std::max<std::int64_t>(p.heads_kv, 1)) * p.cache_seqlen_max *
         static_cast<std::int64_t>(sizeof(float));
}

void BlasDecodeBaseline::Run() {
  RunInArrangement(arrangement_, p_.num_threads, p_.batch * p_.heads_kv,
                   [&](std::int64_t index, int worker, int row_threads) {
                     Group(index / p_.heads_kv, index % p_.heads_kv, scratch_[worker], row_threads);
                   });
}

void BlasDecodeBaseline::Group(std::int64_t b, std::int64_t hk, std::vector<float>& scores,
                               int row_threads) const {
  const DecodeBaselineProblem& p = p_;
  const std::int64_t G = p.heads_q / p.heads_kv, d = p.head_dim, N = p.cache_seqlens[b];
  const std::int64_t ld_q = p.heads_q * d, ld_kv = p.heads_kv * d;  // row strides of q/o and of the cache
  const float* K = p.k + b * p.cache_seqlen_max * ld_kv + hk * d;
  const float* V = p.v + b * p.cache_seqlen_max * ld_kv + hk * d;
  float* S = scores.data();
  for (std::int64_t i = 0; i < p.seqlen_q; ++i) {
    // The group's G query rows at position i are consecutive heads: a G×d matrix with row stride d.
    const float* Q = p.q + (b * p.seqlen_q + i) * ld_q + hk * G * d;
    float* O = p.o + (b * p.seqlen_q + i) * ld_q + hk * G * d;
    const std::int64_t visible = p.causal ? std::clamp<std::int64_t>(N - p.seqlen_q + i + 1, 0, N) : N;
    if (N > 0) {  // S = s·Q Kᵀ
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(G), static_cast<int>(N),
                  static_cast<int>(d), scale_, Q, static_cast<int>(d), K, static_cast<int>(ld_kv), 0.0f, S,
                  static_cast<int>(N));
    }
#pragma omp parallel for num_threads(row_threads) if (row_threads > 1 && G > 1)
    for (std::int64_t g = 0; g < G; ++g) {
      const float row_lse = SafeSoftmaxRow(S + g * N, visible, N);
      if (p.lse != nullptr) p.lse[(b * p.heads_q + hk * G + g) * p.seqlen_q + i] = row_lse;
    }
    if (N > 0) {  // O = P V
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(G), static_cast<int>(d),
                  static_cast<int>(N), 1.0f, S, static_cast<int>(N), V, static_cast<int>(ld_kv), 0.0f, O,
                  static_cast<int>(d));
    } else {
      std::fill(O, O + G * d, 0.0f);
    }
  }
}

}  // namespace flashattn::bench
