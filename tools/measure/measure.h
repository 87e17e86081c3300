// The machine's limits and a call's memory, measured rather than looked up. One implementation each, used by
// `flashattn bench` (peak fractions, bandwidth fractions, --report-memory), `flashattn io` (the ridge point)
// and `flashattn demo` (extra memory per algorithm).
//   FMA peak:   every thread runs many independent chains of fused multiply-adds on full float32 vectors of
//               the widest SIMD target this CPU supports (Highway picks it at run time).
//   Int8 dot:   the same for the integer dot products of the int8 cache's decode (vpdpbusd with AVX-512 VNNI,
//               SDOT on SVE, int16 pairs elsewhere), in the int8 decode kernel's dispatch.
//   Bandwidth:  STREAM-style kernels over arrays far larger than the last-level cache, all threads at once;
//               the same size read before a timed call evicts what the caches held (CacheEvictor).
//   Peak RSS:   Linux's VmHWM, reset through /proc/self/clear_refs.
#ifndef FLASHATTN_TOOLS_MEASURE_MEASURE_H_
#define FLASHATTN_TOOLS_MEASURE_MEASURE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flashattn::measure {

// ---- FMA peak --------------------------------------------------------------------------------------------
struct FmaPeak {
  double gflops = 0;   // best rate over the trials, all threads together (wall clock)
  // Best rate per CPU time: Σ over threads of (its flops / its own CPU seconds). Close to `gflops` on an idle
  // machine, and still the machine's peak when other jobs take turns on the cores.
  double cpu_gflops = 0;
  int threads = 0;
  std::string target;  // Highway target that ran, e.g. "AVX2"
};

// Runs `threads` threads of FMA chains for about `seconds` in total and reports the best trial.
FmaPeak MeasureFmaPeak(int threads, double seconds = 0.3);

// One thread's work: kFmaChains vectors x_c, started at x_c = c + 1 in every lane, each updated
// `iterations` times by x ← x·a + b, summed over chains and lanes. Returns that sum and sets *flops to the
// operations performed (2 per lane per update). Exposed so a test can check the chains really ran.
inline constexpr int kFmaChains = 12;
double RunFmaChains(std::int64_t iterations, float a, float b, double* flops);

// ---- Int8 dot-product peak --------------------------------------------------------------------------------
// Operations count as FLOP do: one multiply-add of an unsigned or signed byte by a signed byte is 2.
struct Int8DotPeak {
  double gops = 0;      // best rate over the trials, all threads together (wall clock)
  double cpu_gops = 0;  // best rate per CPU time, as FmaPeak::cpu_gflops
  int threads = 0;
  std::string target;       // Highway target that ran, e.g. "AVX3_DL"
  std::string instruction;  // what the chains run on it, e.g. "vpdpbusd"
  // Whether the int8 decode's integer P̃V (quantize_probs_u8) runs on these instructions on this target; where it
  // does not (the scalar and SVE targets), it runs on float32 FMAs.
  bool integer_pv = true;
};

// Runs `threads` threads of integer dot-product chains for about `seconds` in total and reports the best trial.
Int8DotPeak MeasureInt8DotPeak(int threads, double seconds = 0.3);

// One thread's work: kInt8DotChains vectors of int32 lanes x_c, started at c + 1 in every lane, each updated
// `iterations` times by x_c ← x_c + (products_per_lane products u·s per lane), on the dispatched target. Exposed
// so that a test can check the chains really ran: sum = lanes · Σ_c (c + 1 + iterations · products_per_lane ·
// u · s), wrapping in int32 per lane (u < 128 where SDOT multiplies signed bytes).
inline constexpr int kInt8DotChains = 12;
struct Int8DotChainsRun {
  std::int64_t sum = 0;               // Σ over chains and lanes
  std::int64_t lanes = 0;             // int32 lanes per vector
  int products_per_lane = 0;          // per update: 4 (vpdpbusd, SDOT), 2 (int16 pairs), 1 (scalar)
  const char* target = "";
  const char* instruction = "";
  bool integer_pv = true;
  double ops = 0;                     // 2 per product
};
Int8DotChainsRun RunInt8DotChains(std::int64_t iterations, std::uint8_t u, std::int8_t s);

// The targets RunInt8DotChains is compiled for that this CPU runs (AVX3_DL among them where it has it), for
// tests that restrict the dispatch to each.
std::vector<std::int64_t> Int8DotTargets();

// ---- Main-memory bandwidth -------------------------------------------------------------------------------
struct Bandwidth {
  // Read: every thread sums its static share of one array (what a decode call does with the KV cache).
  double read_gbs = 0;
  // STREAM triad a[i] = b[i] + s·c[i], counted as STREAM counts it: 3 arrays × 8 bytes per element (the
  // write-allocate read of a[i] is real traffic but not counted).
  double triad_gbs = 0;
  int threads = 0;
  std::int64_t array_bytes = 0;  // size of each array
};

// Both kernels on `threads` threads over arrays of `array_bytes` each (MainMemoryBytes() to measure main
// memory), the whole parallel region timed; the best of `trials` is kept (STREAM's rule: the slower ones are
// the ones other jobs disturbed).
Bandwidth MeasureBandwidth(int threads, std::int64_t array_bytes, int trials = 20);

// Bytes that a read cannot keep in the caches of a CPU with an L3 of `l3_bytes`: 128 MiB (4× a 32 MiB L3),
// or twice the L3 when that is larger. A 260 MiB L3 holds a 128 MiB array, and the "main-memory"
// rate read from it again and again is the L3's, about twice the DRAM's.
std::int64_t MainMemoryBytes(std::int64_t l3_bytes);
// The same for this CPU's detected L3.
std::int64_t MainMemoryBytes();

// Reads a buffer of its own, `bytes` long (rounded down to whole 64-bit words), with `threads` threads (0 = all
// cores) whenever Evict() is called, as the read bandwidth's kernel reads its array (SumWords, each thread its
// share), so that whatever the caches held before is gone: a call timed after it reads its operands from main
// memory, as a model's layer does when the other layers ran in between. Evict() returns the sum of the words,
// each 1: the number of words it read.
class CacheEvictor {
 public:
  CacheEvictor(std::int64_t bytes, int threads);
  std::int64_t Evict() const;
  std::int64_t bytes() const { return bytes_; }

 private:
  std::int64_t bytes_;
  int threads_;
  std::unique_ptr<std::uint64_t[]> words_;
};

// The two kernels on [begin, end), exposed so a test can check what they compute: the sum of the 64-bit
// words of data, and a[i] = b[i] + s·c[i].
std::uint64_t SumWords(const std::uint64_t* data, std::int64_t begin, std::int64_t end);
void Triad(double* a, const double* b, const double* c, double s, std::int64_t begin, std::int64_t end);

// ---- Peak resident memory --------------------------------------------------------------------------------
// The value in KiB of field `key` ("VmHWM", "VmRSS") in the text of /proc/<pid>/status; nullopt if absent.
std::optional<std::int64_t> StatusFieldKib(std::string_view status, std::string_view key);

// Writing "5" to /proc/self/clear_refs resets the high-water mark VmHWM to the current resident size, so
// VmHWM − VmRSS(at reset) after a call is the most extra memory the call had resident at any moment (heap,
// stacks of new threads, touched pages).
class PeakRssProbe {
 public:
  // Resets the high-water mark; available() is false when the kernel does not allow it.
  PeakRssProbe();
  bool available() const { return available_; }
  // Peak resident bytes above the resident size at construction, so far.
  std::int64_t PeakGrowthBytes() const;

 private:
  bool available_ = false;
  std::int64_t rss_at_reset_kib_ = 0;
};

}  // namespace flashattn::measure

#endif  // FLASHATTN_TOOLS_MEASURE_MEASURE_H_
