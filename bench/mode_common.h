// What every mode of `flashattn bench` shares: the run options, the machine limits measured once per run,
// random inputs, the comparison with the baseline's outputs, and the timing of the baseline's threading
// arrangements.
#ifndef FLASHATTN_BENCH_MODE_COMMON_H_
#define FLASHATTN_BENCH_MODE_COMMON_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/baseline.h"
#include "bench/report.h"
#include "bench/timing.h"
#include "flashattn/flashattn.h"
#include "measure/measure.h"

namespace flashattn::bench {

struct RunOptions {
  TimingOptions timing;
  bool baseline = true;
  // The baseline is skipped when its scratch alone would need more than this (a forward baseline at
  // N = 65536 needs 16 GiB a head for the scores).
  std::int64_t baseline_max_scratch_bytes = std::int64_t{4} << 30;
  // Measure the peak resident growth of the first (warm-up) call.
  bool report_memory = false;
  // Decode: read by this before every call, so that each call reads its cache from main memory (null: the
  // cache may stay in the CPU caches from one call to the next).
  std::shared_ptr<const measure::CacheEvictor> evictor;
};

// Measured once per run, before the first row, on the rows' thread count; the bandwidth again before each
// round of --rounds.
struct Limits {
  measure::FmaPeak peak;
  std::optional<measure::Bandwidth> bandwidth;        // only when a decode row is planned
  std::optional<measure::Int8DotPeak> int8_dot_peak;  // likewise
};

// n elements of `dtype` in 16-bit slots (float32 takes two), uniform in [−√3, √3) (unit variance) from a
// counter hash of (seed, index), or all zero for seed 0. Deterministic, so every run times the same inputs.
std::vector<std::uint16_t> RandomElements(std::int64_t n, DType dtype, std::uint64_t seed);

// The attention sinks of a case run with --sinks: one logit of 0.5 per query head (of the order of a score,
// so that the sink takes a real share of each row); empty without.
std::vector<float> SinkLogits(const BenchCase& c);
// The pointer a call takes for them: null when there are none.
inline const float* SinksOrNull(const std::vector<float>& sinks) { return sinks.empty() ? nullptr : sinks.data(); }

// Largest |a[i] − b[i]| over n elements of a (of a_dtype) and b (of b_dtype); NaN if either holds a NaN.
double MaxAbsDiff(const void* a, DType a_dtype, const void* b, DType b_dtype, std::int64_t n);

// The baseline, for one threading arrangement: Prepare allocates what it needs and returns the call to time,
// or an empty function (with *skip_reason set) when it cannot run.
using PrepareBaseline = std::function<std::function<void()>(BaselineArrangement, std::string* skip_reason)>;

// The PrepareBaseline of a baseline class (Baseline::ScratchBytes(problem, arrangement), a constructor from
// (problem, arrangement), Run()) that skips an arrangement whose scratch would exceed
// options.baseline_max_scratch_bytes. `problem` must outlive the function and the baselines it makes.
template <typename Baseline, typename Problem>
PrepareBaseline PrepareWithinScratchLimit(const Problem& problem, const RunOptions& options) {
  const std::int64_t max_scratch_bytes = options.baseline_max_scratch_bytes;
  return [&problem, max_scratch_bytes](BaselineArrangement arrangement, std::string* skip_reason) {
    const std::int64_t scratch = Baseline::ScratchBytes(problem, arrangement);
    if (scratch > max_scratch_bytes) {
      *skip_reason = "needs " + std::to_string(scratch >> 20) + " MiB of scratch";
      return std::function<void()>();
    }
    auto baseline = std::make_shared<Baseline>(problem, arrangement);
    return std::function<void()>([baseline] { baseline->Run(); });
  };
}

// Times the baseline in every arrangement (one only, on one thread) and keeps the faster; appends skip
// reasons to *note. nullopt when every arrangement was skipped.
std::optional<BaselineResult> TimeArrangements(int threads, const TimingOptions& timing,
                                               const PrepareBaseline& prepare, std::string* note);

// Times `call`, the row's library call, into row->timing. With options.report_memory its first call, measured
// alone, gives row->peak_rss_growth_bytes (or a note saying why not) and is the warm-up.
void TimeLibraryCall(const std::function<void()>& call, const RunOptions& options, Row* row);

// The identity of the row every mode fills first: config, FLOPs, the peak and the load average.
Row StartRow(const BenchCase& c, const Limits& limits);

}  // namespace flashattn::bench

#endif  // FLASHATTN_BENCH_MODE_COMMON_H_
