// How well reads from main memory hide under arithmetic, by the order the reads take and by whether the next
// block is requested in software (docs/quantized_cache.md, "What limits the bandwidth").
//
//   build/scripts/overlap_probe [THREADS=2] [ROW_BYTES=128] [WORK=8] [HINT=t1] [MEMORY_MIB=128] [PARTS=4]
//
// Each thread walks a K and a V buffer of its own, laid out as a (seq, head, dim) cache of 8 K/V heads with rows
// of ROW_BYTES, in blocks of 32 keys: every row is read once, and each row read is followed by WORK rounds of 8
// independent float multiply-adds. WORK = 8 is about as fast as the int8 kernel with integer scores and
// integer P̃V on a Zen 4 (28 GB/s on two threads). It prints GB/s of rows read, best of 15 trials of MEMORY_MIB
// each, for two footprints: 2 MiB in all (in the caches: the rate of the arithmetic) and MEMORY_MIB (from main
// memory, as long as it is larger than the L3: pass twice the L3 where that holds 128 MiB), and their ratio.
// Two orders:
//   address  the block's K rows and then its V rows, each in address order
//   decode's K in the score tiles' order (groups of 4 keys, each group head by head, the 4 rows of a head
//            1 KiB apart), V head by head (the accumulation's: a head's 32 rows, then the next head's)
// each with no software requests (the hardware prefetchers alone) and with each line of the next block
// requested (into L2 by default) as a line of the current block is read, in address order (decode's
// RegionPrefetch): the block cut into PARTS parts of at least 64 lines, each part in address order and the
// requests of successive rows going to the parts in turn (PARTS = 1: one stream); and K in address order
// without requests with V as decode reads it, requests and all.
// HINT is the instruction that requests a line: t1 (prefetcht1, into L2, what decode uses), t2, t0 (into L1
// as well), nta or w (prefetchw).
// The sums only keep the loads and the arithmetic from being optimized away; nothing here uses flashattn. The
// build compiles it on x86 (scripts/CMakeLists.txt).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace {

constexpr int kHeads = 8, kKeysPerBlock = 32, kTrials = 15;

struct Shape {
  int row_bytes, work, parts;
  long keys;  // per thread
  long KeyBytes() const { return long{kHeads} * row_bytes; }
  long BlockBytes() const { return kKeysPerBlock * KeyBytes(); }
};

// Reads one row and does `work` rounds of arithmetic on it; both go into `acc`.
inline void ReadRow(const char* row, const Shape& s, __m256i& acc) {
  __m256i bits = _mm256_setzero_si256();  // the row's own, so that rows do not wait on one another
  for (int b = 0; b < s.row_bytes; b += 32) {
    bits = _mm256_add_epi64(bits, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + b)));
  }
  const __m256 c = _mm256_set1_ps(0.001f), x = _mm256_castsi256_ps(bits);
  // 8 independent chains, each with a multiplier of its own
  const __m256 m0 = _mm256_set1_ps(0.999f), m1 = _mm256_set1_ps(0.998f), m2 = _mm256_set1_ps(0.997f),
               m3 = _mm256_set1_ps(0.996f), m4 = _mm256_set1_ps(0.995f), m5 = _mm256_set1_ps(0.994f),
               m6 = _mm256_set1_ps(0.993f), m7 = _mm256_set1_ps(0.992f);
  __m256 a0 = x, a1 = x, a2 = x, a3 = x, a4 = x, a5 = x, a6 = x, a7 = x;
  for (int i = 0; i < s.work; ++i) {
    a0 = _mm256_fmadd_ps(a0, m0, c), a1 = _mm256_fmadd_ps(a1, m1, c), a2 = _mm256_fmadd_ps(a2, m2, c);
    a3 = _mm256_fmadd_ps(a3, m3, c), a4 = _mm256_fmadd_ps(a4, m4, c), a5 = _mm256_fmadd_ps(a5, m5, c);
    a6 = _mm256_fmadd_ps(a6, m6, c), a7 = _mm256_fmadd_ps(a7, m7, c);
  }
  const __m256 sum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                                   _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
  acc = _mm256_xor_si256(acc, _mm256_castps_si256(sum));
}

// The instructions that can request a line; __builtin_prefetch's (rw, locality) for each.
enum class Hint { kT1, kT2, kT0, kNta, kW };

template <Hint kHint>
inline void RequestLine(const char* line) {
  if constexpr (kHint == Hint::kT1) __builtin_prefetch(line, 0, 2);
  if constexpr (kHint == Hint::kT2) __builtin_prefetch(line, 0, 1);
  if constexpr (kHint == Hint::kT0) __builtin_prefetch(line, 0, 3);
  if constexpr (kHint == Hint::kNta) __builtin_prefetch(line, 0, 0);
  if constexpr (kHint == Hint::kW) __builtin_prefetch(line, 1, 3);
  asm volatile("" : : "r"(line));
}

// Requests the lines of one region, `lines` at a time: the region cut into up to kMaxParts parts of at least
// 64 lines, each part in address order, the calls going to the parts in turn.
constexpr int kMaxParts = 16;
template <Hint kHint>
struct Requests {
  const char* next[kMaxParts] = {};
  const char* end[kMaxParts] = {};
  int parts = 0, part = 0;
  Requests() = default;
  Requests(const char* first, long bytes, int max_parts) {
    const long lines = bytes / 64;
    parts = static_cast<int>(std::clamp<long>(lines / 64, 1, max_parts));
    const long part_lines = (lines + parts - 1) / parts;
    for (int k = 0; k < parts; ++k) {
      next[k] = first + 64 * std::min(k * part_lines, lines);
      end[k] = first + 64 * std::min((k + 1) * part_lines, lines);
    }
  }
  void Next(int lines) {
    if (parts == 0) return;
    for (const char*& line = next[part]; lines > 0 && line < end[part]; --lines, line += 64) RequestLine<kHint>(line);
    if (++part == parts) part = 0;
  }
};

// How one tensor is read: in decode's order or in address order, with or without software requests.
struct Reads {
  bool decode_order, request;
};

// One case: how K is read, then how V is.
struct Case {
  const char* name;
  Reads k, v;
};

// One thread's pass over its K and V buffers.
template <Hint kHint>
std::uint64_t Pass(const char* K, const char* V, const Shape& s, const Case& how) {
  const long key_bytes = s.KeyBytes(), block = s.BlockBytes();
  const int lines_per_row = s.row_bytes / 64;
  const auto row = [&](const char* base, long key, int head) {
    return base + key * key_bytes + long{head} * s.row_bytes;
  };
  __m256i acc = _mm256_setzero_si256();
  for (long j0 = 0; j0 + kKeysPerBlock <= s.keys; j0 += kKeysPerBlock) {
    const bool has_next = j0 + 2 * kKeysPerBlock <= s.keys;
    const auto next_block = [&](const char* base, bool request) {
      const char* first = row(base, j0 + kKeysPerBlock, 0);
      return request && has_next ? Requests<kHint>(first, block, s.parts) : Requests<kHint>();
    };
    Requests<kHint> next_k = next_block(K, how.k.request), next_v = next_block(V, how.v.request);
    const auto read = [&](Requests<kHint>& requests, const char* r) {
      requests.Next(lines_per_row);
      ReadRow(r, s, acc);
    };
    if (how.k.decode_order) {  // the score tiles': groups of 4 keys, each group head by head
      for (long c0 = 0; c0 < kKeysPerBlock; c0 += 4)
        for (int h = 0; h < kHeads; ++h)
          for (long c = c0; c < c0 + 4; ++c) read(next_k, row(K, j0 + c, h));
    } else {
      for (long c = 0; c < kKeysPerBlock; ++c)
        for (int h = 0; h < kHeads; ++h) read(next_k, row(K, j0 + c, h));
    }
    if (how.v.decode_order) {  // the accumulation's: head by head
      for (int h = 0; h < kHeads; ++h)
        for (long c = 0; c < kKeysPerBlock; ++c) read(next_v, row(V, j0 + c, h));
    } else {
      for (long c = 0; c < kKeysPerBlock; ++c)
        for (int h = 0; h < kHeads; ++h) read(next_v, row(V, j0 + c, h));
    }
  }
  alignas(32) std::uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

// Best GB/s of rows read over kTrials trials of `passes` passes of every thread at once.
template <Hint kHint>
double BestGbs(const std::vector<char*>& K, const std::vector<char*>& V, const Shape& s, const Case& how,
               int passes) {
  const int threads = static_cast<int>(K.size());
  double best = 1e30;
  volatile std::uint64_t sink = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    const auto start = std::chrono::steady_clock::now();
    std::uint64_t total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
      const int t = omp_get_thread_num();
      for (int pass = 0; pass < passes; ++pass) total += Pass<kHint>(K[t], V[t], s, how);
    }
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    sink = sink + total;
  }
  const double bytes = 2.0 * threads * passes * (s.keys / kKeysPerBlock) * s.BlockBytes();
  return bytes / best * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int row_bytes = argc > 2 ? std::atoi(argv[2]) : 128;
  const int work = argc > 3 ? std::atoi(argv[3]) : 8;
  const std::string hint_name = argc > 4 ? argv[4] : "t1";
  const long memory_mib = argc > 5 ? std::atol(argv[5]) : 128;
  const int parts = argc > 6 ? std::atoi(argv[6]) : 4;
  using Measure = double (*)(const std::vector<char*>&, const std::vector<char*>&, const Shape&, const Case&, int);
  const std::map<std::string, Measure> hints = {{"t1", BestGbs<Hint::kT1>},
                                                {"t2", BestGbs<Hint::kT2>},
                                                {"t0", BestGbs<Hint::kT0>},
                                                {"nta", BestGbs<Hint::kNta>},
                                                {"w", BestGbs<Hint::kW>}};
  if (threads < 1 || row_bytes < 64 || row_bytes % 64 != 0 || work < 0 || !hints.count(hint_name) ||
      memory_mib < 2 || memory_mib % 2 != 0 || parts < 1 || parts > kMaxParts) {
    std::fprintf(stderr,
                 "usage: %s [THREADS >= 1] [ROW_BYTES, a multiple of 64] [WORK >= 0] [HINT: t1 t2 t0 nta w] "
                 "[MEMORY_MIB, even, >= 2] [PARTS, 1 to %d]\n",
                 argv[0], kMaxParts);
    return 2;
  }
  const Measure best_gbs = hints.at(hint_name);
  std::printf("%d threads, 8 K/V heads, rows of %d bytes, %d rounds of 8 FMAs per row, requests by %s in up to %d "
              "parts; GB/s, best of %d\n", threads, row_bytes, work, hint_name.c_str(), parts, kTrials);
  constexpr Reads kAddress{false, false}, kAddressRequested{false, true}, kDecode{true, false},
      kDecodeRequested{true, true};
  const Case cases[] = {{"address order, no requests", kAddress, kAddress},
                        {"address order, requests", kAddressRequested, kAddressRequested},
                        {"decode's order, no requests", kDecode, kDecode},
                        {"decode's order, requests (decode)", kDecodeRequested, kDecodeRequested},
                        {"K address, V decode's + requests", kAddress, kDecodeRequested}};
  constexpr int kCases = sizeof(cases) / sizeof(cases[0]);
  std::printf("%-34s %8s %6ld MiB %7s\n", "K and V read in", "2 MiB", memory_mib, "ratio");
  double in_cache[kCases], from_memory[kCases];
  for (const long total_mib : {2L, memory_mib}) {
    Shape s{row_bytes, work, parts, 0};
    const long buffer_bytes = ((total_mib << 20) / (2 * threads) + 4095) / 4096 * 4096;  // K and V of each thread
    s.keys = buffer_bytes / s.BlockBytes() * kKeysPerBlock;
    if (s.keys < 2 * kKeysPerBlock) {
      std::fprintf(stderr, "%ld MiB over %d threads leaves fewer than two blocks of %ld-byte rows per thread\n",
                   total_mib, threads, long{row_bytes});
      return 2;
    }
    std::vector<char*> K(threads), V(threads);
    for (int t = 0; t < threads; ++t) {
      K[t] = static_cast<char*>(std::aligned_alloc(4096, buffer_bytes));
      V[t] = static_cast<char*>(std::aligned_alloc(4096, buffer_bytes));
      std::memset(K[t], 1, buffer_bytes);
      std::memset(V[t], 1, buffer_bytes);
    }
    for (int i = 0; i < kCases; ++i) {
      // each trial reads MEMORY_MIB, the small footprint over and over
      const double gbs = best_gbs(K, V, s, cases[i], static_cast<int>(memory_mib / total_mib));
      (total_mib == 2 ? in_cache : from_memory)[i] = gbs;
    }
    for (int t = 0; t < threads; ++t) std::free(K[t]), std::free(V[t]);
  }
  for (int i = 0; i < kCases; ++i) {
    std::printf("%-34s %8.1f %10.1f %7.2f\n", cases[i].name, in_cache[i], from_memory[i],
                from_memory[i] / in_cache[i]);
  }
}
