// How fast this machine's cores read main memory in the patterns that matter to decode, next to the one
// `flashattn bench` calls its read bandwidth (docs/quantized_cache.md, "What limits the bandwidth").
//
//   build/scripts/read_patterns [THREADS]          (built with the benchmarks, scripts/CMakeLists.txt)
//
// Each pattern sums the 64-bit words of a 128 MiB buffer (split between THREADS threads, default 2), best of
// 20 passes as the bench's own measurement takes it, and prints GB/s:
//   streams S       each thread reads its share as S sequential streams side by side, word by word (S = 4 is
//                   the bench's read bandwidth, tools/measure/bandwidth.cc), the hardware prefetchers alone
//   blocks B, K     the decode kernel's pattern: each thread reads its share block by block (B bytes, as a
//                   block of 32 keys of every K/V head of a contiguous cache), and as each 64-byte line of
//                   block j is read, one line of block j + 1 is requested into L2 (K = 0: no requests, the
//                   hardware alone)
// The sums only keep the loads from being optimized away, several side by side so that the adds do not limit
// the rate (with one chain of adds, four streams read 34-40 GB/s on two Emerald Rapids cores, with one sum per
// stream 47-48 GB/s); nothing here uses flashattn.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr std::size_t kBytes = std::size_t{128} << 20;
constexpr int kTrials = 20;
constexpr std::size_t kWordsPerLine = 64 / sizeof(std::uint64_t);

// Best GB/s over kTrials passes of `pass(words, begin, end)` on each thread's share of the buffer.
template <class Pass>
double BestGbs(const std::uint64_t* words, int threads, const Pass& pass) {
  const std::size_t n = kBytes / sizeof(std::uint64_t);
  double best = 1e30;
  volatile std::uint64_t sink = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    const auto start = std::chrono::steady_clock::now();
    std::uint64_t total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
      const std::size_t t = static_cast<std::size_t>(omp_get_thread_num());
      total += pass(words, n * t / threads, n * (t + 1) / threads);
    }
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    sink = sink + total;
  }
  return static_cast<double>(kBytes) / best * 1e-9;
}

// The sum of n partial sums.
std::uint64_t Total(const std::uint64_t* sums, std::size_t n) {
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < n; ++i) total += sums[i];
  return total;
}

// S sequential streams over [begin, end), read side by side a word at a time into one sum per stream, as the
// bench's four: a single sum would make its chain of adds the limit instead of the memory.
template <std::size_t S>
std::uint64_t StreamsOf(const std::uint64_t* words, std::size_t begin, std::size_t end) {
  const std::size_t part = (end - begin) / S;
  std::uint64_t sums[S] = {};
  for (std::size_t i = 0; i < part; ++i) {
    for (std::size_t s = 0; s < S; ++s) sums[s] += words[begin + s * part + i];
  }
  return Total(sums, S);
}

// Prints the GB/s of S streams per thread.
template <std::size_t S>
void PrintStreams(const std::uint64_t* words, int threads) {
  const double gbs = BestGbs(words, threads, [](const std::uint64_t* w, std::size_t b, std::size_t e) {
    return StreamsOf<S>(w, b, e);
  });
  std::printf("streams %zu%s: %.1f\n", S, S == 4 ? " (the bench's read bandwidth)" : "", gbs);
}

// Blocks of `block_words` read in address order, each line of the next block requested into L2 as a line of
// the current one is read (when `request` is set).
std::uint64_t Blocks(const std::uint64_t* words, std::size_t begin, std::size_t end, std::size_t block_words,
                     bool request) {
  std::uint64_t sums[kWordsPerLine] = {};  // one per word of a line: independent adds
  for (std::size_t b = begin; b + block_words <= end; b += block_words) {
    for (std::size_t i = 0; i < block_words; i += kWordsPerLine) {
      if (request && b + block_words + i < end) __builtin_prefetch(words + b + block_words + i, 0, 2);
      for (std::size_t w = 0; w < kWordsPerLine; ++w) sums[w] += words[b + i + w];
    }
  }
  return Total(sums, kWordsPerLine);
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  std::vector<std::uint64_t> buffer(kBytes / sizeof(std::uint64_t));
  std::memset(buffer.data(), 1, kBytes);  // every page touched before the timed passes
  const std::uint64_t* words = buffer.data();
  std::printf("%d threads, 128 MiB, best of %d, GB/s\n", threads, kTrials);
  PrintStreams<1>(words, threads);
  PrintStreams<2>(words, threads);
  PrintStreams<4>(words, threads);
  PrintStreams<8>(words, threads);
  for (const std::size_t block_bytes : {std::size_t{32768}, std::size_t{65536}}) {
    for (const bool request : {false, true}) {
      const double gbs = BestGbs(words, threads, [&](const std::uint64_t* w, std::size_t b, std::size_t e) {
        return Blocks(w, b, e, block_bytes / sizeof(std::uint64_t), request);
      });
      std::printf("blocks %zu, %s: %.1f\n", block_bytes, request ? "next block requested line by line" : "no requests",
                  gbs);
    }
  }
}
