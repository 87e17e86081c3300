// STREAM-style main-memory bandwidth (McCalpin's STREAM: arrays several times the last-level cache, every
// thread on its static share, the best of several trials). Only the read and triad kernels: a decode call
// reads its cache and writes nearly nothing, and triad is the figure people quote.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "common/cpu_caches.h"
#include "measure/measure.h"

namespace flashattn::measure {

std::uint64_t SumWords(const std::uint64_t* data, std::int64_t begin, std::int64_t end) {
  // Four streams, one per quarter of the range, read side by side: one stream per core is bound by the
  // latency of its misses (the hardware prefetcher runs a limited distance ahead), several reach the bus's
  // rate, as a kernel reading K and V does. Independent adds the compiler vectorizes.
  const std::int64_t quarter = (end - begin) / 4;
  const std::uint64_t* s0 = data + begin;
  const std::uint64_t* s1 = s0 + quarter;
  const std::uint64_t* s2 = s1 + quarter;
  const std::uint64_t* s3 = s2 + quarter;
  std::uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  for (std::int64_t i = 0; i < quarter; ++i) {
    a0 += s0[i];
    a1 += s1[i];
    a2 += s2[i];
    a3 += s3[i];
  }
  for (std::int64_t i = begin + 4 * quarter; i < end; ++i) a0 += data[i];
  return (a0 + a1) + (a2 + a3);
}

void Triad(double* a, const double* b, const double* c, double s, std::int64_t begin, std::int64_t end) {
  for (std::int64_t i = begin; i < end; ++i) a[i] = b[i] + s * c[i];
}

namespace {

// Thread t's share [begin, end) of n elements (static schedule, as STREAM's OpenMP loops).
std::pair<std::int64_t, std::int64_t> Share(std::int64_t n, int threads, int t) {
  return {n * t / threads, n * (t + 1) / threads};
}

// Best wall-clock seconds over `trials` runs of work(thread) on every thread at once.
template <typename Work>
double BestSeconds(int threads, int trials, Work&& work) {
  using Clock = std::chrono::steady_clock;
  double best = 0;
  for (int trial = 0; trial < trials; ++trial) {
    Clock::time_point start;
#pragma omp parallel num_threads(threads)
    {
#pragma omp barrier
#pragma omp master
      start = Clock::now();
#pragma omp barrier
      work(omp_get_thread_num());
    }  // the implicit barrier: the trial ends when the last thread does
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (trial == 0 || seconds < best) best = seconds;
  }
  return best;
}

// n elements of `value`, each thread's share written first by that thread, so that its pages lie on that
// thread's memory node (the shares the kernels read later).
template <typename T>
std::unique_ptr<T[]> FirstTouchArray(std::int64_t n, int threads, T value) {
  std::unique_ptr<T[]> data(new T[static_cast<std::size_t>(n)]);
#pragma omp parallel num_threads(threads)
  {
    const auto [begin, end] = Share(n, threads, omp_get_thread_num());
    std::fill(data.get() + begin, data.get() + end, value);
  }
  return data;
}

}  // namespace

Bandwidth MeasureBandwidth(int threads, std::int64_t array_bytes, int trials) {
  Bandwidth result;
  result.threads = threads > 0 ? threads : omp_get_max_threads();
  result.array_bytes = array_bytes;
  const int T = result.threads;
  const std::int64_t n = array_bytes / 8;
  const auto a = FirstTouchArray(n, T, 1.0), b = FirstTouchArray(n, T, 2.0), c = FirstTouchArray(n, T, 0.5);

  volatile std::uint64_t sink = 0;
  const auto* words = reinterpret_cast<const std::uint64_t*>(b.get());
  const double read_s = BestSeconds(T, trials, [&](int t) {
    const auto [begin, end] = Share(n, T, t);
    sink = sink + SumWords(words, begin, end);
  });
  const double triad_s = BestSeconds(T, trials, [&](int t) {
    const auto [begin, end] = Share(n, T, t);
    Triad(a.get(), b.get(), c.get(), 3.0, begin, end);
  });
  sink = sink + static_cast<std::uint64_t>(a[n / 2]);
  result.read_gbs = static_cast<double>(n) * 8 / read_s * 1e-9;
  result.triad_gbs = 3.0 * static_cast<double>(n) * 8 / triad_s * 1e-9;
  return result;
}

std::int64_t MainMemoryBytes(std::int64_t l3_bytes) {
  return std::max<std::int64_t>(std::int64_t{128} << 20, 2 * l3_bytes);
}

std::int64_t MainMemoryBytes() { return MainMemoryBytes(DetectedCpuCaches().l3.bytes); }

CacheEvictor::CacheEvictor(std::int64_t bytes, int threads)
    : bytes_(bytes / 8 * 8),
      threads_(threads > 0 ? threads : omp_get_max_threads()),
      words_(FirstTouchArray(bytes_ / 8, threads_, std::uint64_t{1})) {}

std::int64_t CacheEvictor::Evict() const {
  std::uint64_t sum = 0;
#pragma omp parallel num_threads(threads_) reduction(+ : sum)
  {
    const auto [begin, end] = Share(bytes_ / 8, threads_, omp_get_thread_num());
    sum += SumWords(words_.get(), begin, end);
  }
  return static_cast<std::int64_t>(sum);
}

}  // namespace flashattn::measure
