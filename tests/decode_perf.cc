// decode_perf: times decode() on one configuration and reports the K/V bytes it must read per second
// against the machine's read bandwidth measured in the same run, and (float32 cache) against an unfused
// OpenBLAS decode (S = Q Kᵀ, softmax, O = P V). A measuring tool, not a test; until `flashattn bench
// --mode decode` exists it is how the numbers in the report were taken:
//   decode_perf BATCH HQ HKV CACHE_LEN D DTYPE THREADS [SPLITS] [PAGE_SIZE]
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/element.h"
#include "flashattn/decode.h"

namespace {

using Clock = std::chrono::steady_clock;

template <typename F>
double MedianSeconds(int reps, F&& f) {
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const auto start = Clock::now();
    f();
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Read bandwidth on `threads` threads: a sum over 512 MiB of float32 (far beyond every cache), bytes/s.
double ReadBandwidth(int threads) {
  const std::size_t n = std::size_t{1} << 27;
  std::vector<float> a(n, 1.0f);
  double sink = 0.0;
  const double seconds = MedianSeconds(5, [&] {
    double total = 0.0;
#pragma omp parallel for reduction(+ : total) num_threads(threads) schedule(static)
    for (std::size_t i = 0; i < n; i += 8) {
      float s = 0.0f;
      for (int k = 0; k < 8; ++k) s += a[i + k];
      total += s;
    }
    sink += total;
  });
  if (sink == 0.0) std::puts("");
  return n * sizeof(float) / seconds;
}

// Unfused decode for a contiguous float32 cache: per (b, K/V head) the G·Nq query rows as one matrix.
void BlasDecode(const flashattn::DecodeParams& p, std::vector<float>& S, std::vector<float>& O) {
  const std::int64_t d = p.head_dim, G = p.heads_q / p.heads_kv, R = G * p.seqlen_q;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t Nk = p.cache_seqlens[b];
    for (std::int64_t hk = 0; hk < p.heads_kv; ++hk) {
      const float* q = static_cast<const float*>(p.q) + b * p.q_strides.batch + hk * G * d;  // Nq = 1: R = G rows
      const float* k = static_cast<const float*>(p.k_cache) + b * p.cache_strides.batch + hk * d;
      const float* v = static_cast<const float*>(p.v_cache) + b * p.cache_strides.batch + hk * d;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, R, Nk, d, scale, q, d, k, p.cache_strides.seq, 0.0f,
                  S.data(), Nk);
      for (std::int64_t r = 0; r < R; ++r) {
        float* row = &S[r * Nk];
        const float m = *std::max_element(row, row + Nk);
        float l = 0.0f;
        for (std::int64_t j = 0; j < Nk; ++j) l += (row[j] = std::exp(row[j] - m));
        for (std::int64_t j = 0; j < Nk; ++j) row[j] /= l;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, R, d, Nk, 1.0f, S.data(), Nk, v, p.cache_strides.seq,
                  0.0f, &O[(b * p.heads_kv + hk) * R * d], d);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 8) {
    std::fprintf(stderr, "usage: %s BATCH HQ HKV CACHE_LEN D f32|f16|bf16 THREADS [SPLITS] [PAGE_SIZE]\n", argv[0]);
    return 2;
  }
  using namespace flashattn;
  DecodeParams p;
  p.batch = std::atoll(argv[1]);
  p.heads_q = std::atoll(argv[2]);
  p.heads_kv = std::atoll(argv[3]);
  const std::int64_t N = std::atoll(argv[4]);
  p.head_dim = std::atoll(argv[5]);
  const std::string dtype = argv[6];
  p.dtype = p.cache_dtype = dtype == "f32" ? DType::kF32 : dtype == "f16" ? DType::kF16 : DType::kBF16;
  const int threads = std::atoi(argv[7]);
  p.num_threads = threads;
  p.num_splits = argc > 8 ? std::atoll(argv[8]) : 0;
  const std::int64_t page_size = argc > 9 ? std::atoll(argv[9]) : 0;
  p.seqlen_q = 1;
  const std::int64_t d = p.head_dim, elem = static_cast<std::int64_t>(SizeOf(p.dtype));
  std::vector<std::int32_t> seqlens(p.batch, static_cast<std::int32_t>(N)), table;
  p.cache_seqlens = seqlens.data();
  if (page_size > 0) {  // pages in shuffled order
    p.page_size = page_size;
    p.max_pages = (N + page_size - 1) / page_size;
    p.num_pages = p.batch * p.max_pages;
    p.block_table_stride = p.max_pages;
    table.resize(p.num_pages);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(1));
    p.block_table = table.data();
  } else {
    p.cache_seqlen_max = N;
  }
  p.SetContiguousStrides();
  const std::int64_t cache_elems = p.batch * N * p.heads_kv * d;
  std::vector<char> q(p.batch * p.heads_q * d * elem), k(cache_elems * elem), v(cache_elems * elem);
  std::vector<char> o(p.batch * p.heads_q * d * elem);
  std::mt19937 rng(2);
  std::normal_distribution<float> normal;
  for (std::int64_t n = 0; n < p.batch * p.heads_q * d; ++n) StoreFromFloat(q.data(), p.dtype, n, normal(rng));
  for (std::int64_t n = 0; n < cache_elems; ++n) {
    StoreFromFloat(k.data(), p.dtype, n, normal(rng));
    StoreFromFloat(v.data(), p.dtype, n, normal(rng));
  }
  p.q = q.data(), p.k_cache = k.data(), p.v_cache = v.data(), p.o = o.data();

  const double bytes_read = 2.0 * cache_elems * elem;
  const double bandwidth = ReadBandwidth(threads);
  decode(p);  // warm-up
  const double seconds = MedianSeconds(15, [&] { decode(p); });
  std::printf("{\"mode\": \"decode\", \"dtype\": \"%s\", \"batch\": %lld, \"heads\": %lld, \"heads_kv\": %lld, "
              "\"cache_len\": %lld, \"headdim\": %lld, \"threads\": %d, \"num_splits\": %lld, \"paged\": %lld, "
              "\"median_ms\": %.3f, \"bytes_read\": %.0f, \"gbps\": %.2f, \"bandwidth_gbps\": %.2f, "
              "\"bandwidth_fraction\": %.3f",
              dtype.c_str(), (long long)p.batch, (long long)p.heads_q, (long long)p.heads_kv, (long long)N,
              (long long)d, threads,
              (long long)(p.num_splits == 0 ? ChooseNumSplits(p.batch, N, threads) : p.num_splits),
              (long long)page_size, seconds * 1e3, bytes_read, bytes_read / seconds / 1e9, bandwidth / 1e9,
              bytes_read / seconds / bandwidth);
  if (p.dtype == DType::kF32 && page_size == 0) {
    openblas_set_num_threads(threads);
    std::vector<float> S((p.heads_q / p.heads_kv) * N), O(p.batch * p.heads_q * d);
    BlasDecode(p, S, O);
    const double blas_seconds = MedianSeconds(15, [&] { BlasDecode(p, S, O); });
    std::printf(", \"blas_median_ms\": %.3f, \"blas_gbps\": %.2f", blas_seconds * 1e3,
                bytes_read / blas_seconds / 1e9);
  }
  std::printf("}\n");
  return 0;
}
