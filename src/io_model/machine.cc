// Cache detection and the two small measurements behind the ridge point.
#include "io_model/machine.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
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

// The machine's rate for `work`, robust to sharing the cores with other jobs: every thread times many short
// pieces of work (tens of microseconds, far below a scheduler time slice, so most run undisturbed), keeps
// the `pick`-th fastest rate of its own, and the threads' rates are summed. work(thread, piece) does one
// piece of `units` units and returns a value that must not be discarded.
template <typename Work>
double RateOfPieces(int threads, int pieces, double units, double pick, Work&& work) {
  std::vector<double> rate(static_cast<std::size_t>(threads));
  volatile double sink = 0.0;
#pragma omp parallel num_threads(threads)
  {
    const int thread = omp_get_thread_num();
    std::vector<double> rates;
    double total = 0.0;
    for (int piece = 0; piece < pieces; ++piece) {
      const auto start = std::chrono::steady_clock::now();
      total += work(thread, piece);
      rates.push_back(units / Seconds(start));
    }
    std::sort(rates.begin(), rates.end(), std::greater<>());
    rate[thread] = rates[static_cast<std::size_t>(pick * (pieces - 1))];
#pragma omp critical
    sink = sink + total;
  }
  double sum = 0.0;
  for (double r : rate) sum += r;
  return sum;
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
  // FMA: pieces of 20 µs at full speed; the best piece of each thread is its core's peak.
  constexpr std::int64_t kIterations = 10'000;
  const bool fma = HasAvx2Fma();
  machine.fma_gflops = 1e-9 * RateOfPieces(machine.threads, 2000, 2.0 * kChains * kIterations, 0.0,
                                           [fma](int thread, int) {
    const float b = 1e-7f * static_cast<float>(thread + 1);
    return static_cast<double>(fma ? FmaChainsAvx2(kIterations, 0.999999f, b)
                                   : FmaChainsPlain(kIterations, 0.999999f, b));
  });
  // Bandwidth: each thread streams through its own 48 MiB slice (together three times a 32 MiB L3) in
  // pieces of 256 KiB, twice over; the median piece is its rate with DRAM behind it.
  constexpr std::int64_t kPieceWords = (256 << 10) / 8, kPiecesPerSlice = 192;
  const std::int64_t slice = kPieceWords * kPiecesPerSlice;
  std::vector<std::uint64_t> data(static_cast<std::size_t>(slice * machine.threads));
#pragma omp parallel for num_threads(machine.threads) schedule(static)
  for (std::int64_t i = 0; i < slice * machine.threads; ++i) data[i] = static_cast<std::uint64_t>(i);
  machine.bandwidth_gbs = 1e-9 * RateOfPieces(machine.threads, 2 * kPiecesPerSlice, 8.0 * kPieceWords, 0.5,
                                              [&](int thread, int piece) {
    const std::uint64_t* words = data.data() + thread * slice + (piece % kPiecesPerSlice) * kPieceWords;
    return static_cast<double>(SumWords(words, kPieceWords));
  });
  return machine;
}

}  // namespace flashattn::io_model
