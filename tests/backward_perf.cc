// A measuring tool, not a test: backward() throughput against the measured FMA peak and against the
// standard backward written with OpenBLAS (materializes P and dS), and the extra memory of one call.
//   backward_perf [N] [d] [heads] [threads] [reps] [memory_N]
// FLOPs follow flash-attn's convention: 2.5 × the forward's 4·b·h·N²·d, halved under a causal mask.
#include <cblas.h>
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "bench/fma_peak.h"
#include "flashattn/backward.h"

namespace {

using flashattn::AttentionParams;
using flashattn::BackwardParams;

struct Tensors {
  std::vector<float> q, k, v, o, dO, dq, dk, dv, lse;
  BackwardParams params;
};

// Head-major (batch 1, H, N, d) tensors, so that each head is a contiguous N×d matrix for OpenBLAS.
void Make(Tensors& t, std::int64_t N, std::int64_t d, std::int64_t heads, int threads, bool causal) {
  const std::size_t n = static_cast<std::size_t>(heads * N * d);
  for (auto* x : {&t.q, &t.k, &t.v, &t.o, &t.dO, &t.dq, &t.dk, &t.dv}) x->assign(n, 0.0f);
  t.lse.assign(static_cast<std::size_t>(heads * N), 0.0f);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (auto* x : {&t.q, &t.k, &t.v, &t.dO})
    for (float& e : *x) e = normal(rng);
  AttentionParams& a = t.params.attention;
  a.batch = 1, a.seqlen_q = a.seqlen_k = N, a.heads_q = a.heads_kv = heads, a.head_dim = d;
  a.causal = causal, a.num_threads = threads;
  a.q = t.q.data(), a.k = t.k.data(), a.v = t.v.data(), a.o = t.o.data(), a.lse = t.lse.data();
  t.params.d_o = t.dO.data(), t.params.dq = t.dq.data(), t.params.dk = t.dk.data(), t.params.dv = t.dv.data();
  t.params.SetHeadMajorStrides();
  flashattn::forward(a);
}

template <typename Fn>
double MedianSeconds(int reps, Fn&& fn) {
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// The standard backward with OpenBLAS, per head (non-causal): S = s Q Kᵀ, P = exp(S − LSE), dV = Pᵀ dO,
// dP = dO Vᵀ, dS = P ∘ (dP − D), dQ = s dS K, dK = s dSᵀ Q, with P and dS materialized (N×N).
void BlasBackward(Tensors& t, std::int64_t N, std::int64_t d, std::int64_t heads, int threads) {
  const float s = 1.0f / std::sqrt(static_cast<float>(d));
  static std::vector<float> P, dS, D;
  P.resize(N * N), dS.resize(N * N), D.resize(N);
  for (std::int64_t h = 0; h < heads; ++h) {
    const float *Q = &t.q[h * N * d], *K = &t.k[h * N * d], *V = &t.v[h * N * d], *O = &t.o[h * N * d];
    const float *dO = &t.dO[h * N * d], *lse = &t.lse[h * N];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, N, d, s, Q, d, K, d, 0.0f, P.data(), N);
#pragma omp parallel for num_threads(threads)
    for (std::int64_t i = 0; i < N; ++i) {
      float dot = 0.0f;
      for (std::int64_t c = 0; c < d; ++c) dot += dO[i * d + c] * O[i * d + c];
      D[i] = dot;
      for (std::int64_t j = 0; j < N; ++j) P[i * N + j] = std::exp(P[i * N + j] - lse[i]);
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, d, N, 1.0f, P.data(), N, dO, d, 0.0f,
                &t.dv[h * N * d], d);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, N, d, 1.0f, dO, d, V, d, 0.0f, dS.data(), N);
#pragma omp parallel for num_threads(threads)
    for (std::int64_t i = 0; i < N; ++i)
      for (std::int64_t j = 0; j < N; ++j) dS[i * N + j] = P[i * N + j] * (dS[i * N + j] - D[i]);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, d, N, s, dS.data(), N, K, d, 0.0f,
                &t.dq[h * N * d], d);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, d, N, s, dS.data(), N, Q, d, 0.0f,
                &t.dk[h * N * d], d);
  }
}

long MaxRssKiB() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

}  // namespace

int main(int argc, char** argv) {
  const std::int64_t N = argc > 1 ? std::atoll(argv[1]) : 2048, d = argc > 2 ? std::atoll(argv[2]) : 128;
  const std::int64_t heads = argc > 3 ? std::atoll(argv[3]) : 8;
  const int threads = argc > 4 ? std::atoi(argv[4]) : 2, reps = argc > 5 ? std::atoi(argv[5]) : 3;
  const std::int64_t memory_N = argc > 6 ? std::atoll(argv[6]) : 0;
  openblas_set_num_threads(threads);
  const double peak = flashattn::bench::MeasureFmaPeak(threads).gflops;
  std::printf("FMA peak %.1f GFLOP/s (%d threads); N=%lld d=%lld heads=%lld float32, median of %d\n", peak,
              threads, static_cast<long long>(N), static_cast<long long>(d), static_cast<long long>(heads),
              reps);
  const double flops = 2.5 * 4.0 * heads * static_cast<double>(N) * N * d;
  double full_seconds = 0.0;
  for (bool causal : {false, true}) {
    Tensors t;
    Make(t, N, d, heads, threads, causal);
    const double seconds = MedianSeconds(reps, [&] { flashattn::backward(t.params); });
    const double gflops = (causal ? flops / 2 : flops) / seconds / 1e9;
    std::printf("fused backward %-10s %8.3f s  %6.1f GFLOP/s  %5.1f%% of peak",
                causal ? "causal" : "non-causal", seconds, gflops, 100.0 * gflops / peak);
    if (causal) std::printf("  causal/non-causal time %.2f", seconds / full_seconds);
    std::printf("\n");
    if (causal) break;
    full_seconds = seconds;
    const double blas = MedianSeconds(reps, [&] { BlasBackward(t, N, d, heads, threads); });
    std::printf("OpenBLAS standard backward %8.3f s  %6.1f GFLOP/s  fused speedup %.2fx\n", blas,
                flops / blas / 1e9, blas / full_seconds);
  }
  if (memory_N > 0) {  // inputs, outputs and gradients first, then the growth of one call
    Tensors t;
    Make(t, memory_N, d, 1, threads, false);
    const long before = MaxRssKiB();
    flashattn::backward(t.params);
    std::printf("extra memory of one call at N=%lld d=%lld, 1 head: %.1f MiB (peak RSS growth)\n",
                static_cast<long long>(memory_N), static_cast<long long>(d), (MaxRssKiB() - before) / 1024.0);
  }
}
