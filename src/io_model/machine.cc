// Cache detection and the two small measurements behind the ridge point.
#include "io_model/machine.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

namespace flashattn::io_model {

namespace {

// Enough independent chains to cover the FMA latency on two pipes (12 AVX2 vectors of 8 lanes).
constexpr int kChains = 96;

// x_c ← x_c·a + b, `iterations` times for each chain, as fused multiply-adds on AVX2 + FMA CPUs (chosen at
// run time, so other CPUs run the plain version instead of faulting).
__attribute__((target("avx2,fma"))) float FmaChainsAvx2(std::int64_t iterations, float a, float b) {
  float x[kChains];
  for (int c = 0; c < kChains; ++c) x[c] = 1.0f + 1e-3f * static_cast<float>(c);
  for (std::int64_t it = 0; it < iterations; ++it)
    for (int c = 0; c < kChains; ++c) x[c] = std::fma(x[c], a, b);
  float sum = 0.0f;
  for (int c = 0; c < kChains; ++c) sum += x[c];
  return sum;
}

float FmaChainsPlain(std::int64_t iterations, float a, float b) {
  float x[kChains];
  for (int c = 0; c < kChains; ++c) x[c] = 1.0f + 1e-3f * static_cast<float>(c);
  for (std::int64_t it = 0; it < iterations; ++it)
    for (int c = 0; c < kChains; ++c) x[c] = x[c] * a + b;
  float sum = 0.0f;
  for (int c = 0; c < kChains; ++c) sum += x[c];
  return sum;
}

bool HasAvx2Fma() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

std::uint64_t SumWords(const std::uint64_t* data, std::int64_t n) {
  std::uint64_t sum = 0;
  for (std::int64_t i = 0; i < n; ++i) sum += data[i];
  return sum;
}

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Best rate of `trials` runs of `work` on every thread; `work` returns a value that must not be discarded.
template <typename Work>
double BestRate(int threads, int trials, double units_per_thread, Work&& work) {
  double best = 0.0;
  volatile double sink = 0.0;
  for (int trial = 0; trial < trials; ++trial) {
    const auto start = std::chrono::steady_clock::now();
    double total = 0.0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    total += work(omp_get_thread_num());
    best = std::max(best, units_per_thread * threads / Seconds(start));
    sink = sink + total;
  }
  return best;
}

}  // namespace

std::int64_t DetectL2CacheBytes() {
  const long size = sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (size > 0) return size;
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream level_file(dir + "level"), size_file(dir + "size");
    int level = 0;
    std::string text;  // e.g. "512K"
    if (!(level_file >> level) || level != 2 || !(size_file >> text)) continue;
    const std::int64_t value = std::stoll(text);
    const char unit = text.back();
    return unit == 'K' ? value << 10 : unit == 'M' ? value << 20 : value;
  }
  return 0;
}

Machine MeasureMachine(int threads) {
  Machine machine;
  machine.threads = threads > 0 ? threads : omp_get_max_threads();
  constexpr std::int64_t kIterations = 5'000'000;
  const bool fma = HasAvx2Fma();
  machine.fma_gflops = 1e-9 * BestRate(machine.threads, 5, 2.0 * kChains * kIterations, [fma](int thread) {
    const float b = 1e-7f * static_cast<float>(thread + 1);
    return static_cast<double>(fma ? FmaChainsAvx2(kIterations, 0.999999f, b)
                                   : FmaChainsPlain(kIterations, 0.999999f, b));
  });
  // Each thread reads its own 256/threads MiB slice, far larger than any cache of this class of machine.
  const std::int64_t words = (std::int64_t{256} << 20) / 8;
  const std::int64_t slice = words / machine.threads;
  std::vector<std::uint64_t> data(static_cast<std::size_t>(words));
#pragma omp parallel for num_threads(machine.threads) schedule(static)
  for (std::int64_t i = 0; i < words; ++i) data[i] = static_cast<std::uint64_t>(i);  // first touch per thread
  machine.bandwidth_gbs = 1e-9 * BestRate(machine.threads, 5, 8.0 * slice, [&](int thread) {
    return static_cast<double>(SumWords(data.data() + thread * slice, slice));
  });
  return machine;
}

}  // namespace flashattn::io_model
