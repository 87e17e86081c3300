// What one benchmark row reports, and its two renderings: an aligned table for people and one JSON object
// per line for scripts (`--json`).
#ifndef FLASHATTN_BENCH_REPORT_H_
#define FLASHATTN_BENCH_REPORT_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "bench/bench_case.h"
#include "bench/roofline.h"
#include "bench/timing.h"

namespace flashattn::bench {

struct BaselineResult {
  Timing timing;  // of the faster arrangement
  std::string arrangement;
  std::vector<std::pair<std::string, double>> medians_ms;  // every arrangement tried, by name
  std::string blas_core;  // the OpenBLAS kernel family it ran on (blas_core.h)
};

// Decode and serve rows: the bytes the call must read, against the bandwidth measured in the same run, and its
// roofline.
struct Traffic {
  double bytes_read = 0;       // CountBytesRead
  double triad_gbs = 0;  // measure::Bandwidth::triad_gbs: the denominator of bandwidth_fraction
  double read_gbs = 0;   // measure::Bandwidth::read_gbs: of read_bandwidth_fraction (four read streams)
  std::int64_t num_splits = 0;  // the split count the call used (choose_num_splits when the case says 0)
  std::int64_t evicted_bytes = 0;  // read before each timed call to evict the cache (0: none, a warm cache)
  std::string baseline_cache;  // what the baseline reads, e.g. "f32 contiguous copy"
  // A quantized cache's decode row: the median of the same call over a float16 cache, timed in the same run.
  std::optional<double> f16_cache_median_ms;
  // A decode row over selected keys (top_k): the median of dense decode over top_k contiguous keys, same run.
  std::optional<double> dense_top_k_median_ms;
  double int8_dot_gops = 0;  // measure::Int8DotPeak::gops of the run (0: not measured)
  std::optional<Roofline> roofline;  // DecodeRoofline with this run's limits
};

struct Row {
  BenchCase config;
  Timing timing;
  double flops = 0;
  double peak_gflops = 0;  // FMA peak measured in this run on the same threads
  double peak_cpu_gflops = 0;  // the same per CPU time (see FmaPeak::cpu_gflops)
  std::string peak_target;
  std::optional<BaselineResult> baseline;  // unset when skipped (see note)
  std::optional<double> max_abs_diff_vs_baseline;  // largest |O − O_baseline|, a sanity check of both
  std::optional<std::int64_t> peak_rss_growth_bytes;  // with --report-memory
  std::optional<double> load_average;  // 1-minute load average when the row started
  std::int64_t tensor_bytes = 0;  // inputs and outputs the caller owns (Q, K, V, O, LSE; gradients)
  std::optional<Traffic> traffic;  // decode rows
  std::optional<int> round;  // with --rounds R > 1: which round, from 1
  std::string note;

  double Gflops() const;
  double PeakFraction() const;
  std::optional<double> BaselineGflops() const;
  std::optional<double> SpeedupVsBaseline() const;  // baseline median / this median
  // The same three per CPU time, for a shared machine: the rate with the cores to itself is estimated as
  // flops / (median CPU time / threads), and compared with the FMA peak measured the same way.
  double CpuGflops() const;
  double CpuPeakFraction() const;
  std::optional<double> CpuSpeedupVsBaseline() const;
  // Decode rows (0 / nullopt otherwise): bytes_read / median time, its fractions of the bandwidths, and
  // the baseline's rate over the same bytes.
  double Gbps() const;
  double BandwidthFraction() const;      // gbps / triad bandwidth
  double ReadBandwidthFraction() const;  // gbps / read bandwidth
  std::optional<double> BaselineGbps() const;
  // A quantized cache's row: the float16 cache's median / this median.
  std::optional<double> SpeedupOverF16Cache() const;
  // A selected-key row: this median / dense decode's over top_k contiguous keys.
  std::optional<double> SelectedOverDenseTopK() const;
  // Serve rows (0 otherwise): the query rows of the call (TotalQueryRows) / median time.
  double TokensPerSecond() const;
  // Decode rows with a roofline: its time / this median (1 = as fast as the machine allows).
  std::optional<double> RooflineFraction() const;
};

// One case over the rounds of --rounds R: its rows, one per round, in order.
struct CaseRounds {
  std::vector<Row> rows;

  double MedianMs() const;  // median over the rounds of each round's median time
  // Median over the rounds of each round's roofline fraction; nullopt when a round has none.
  std::optional<double> MedianRooflineFraction() const;
};

// Builds one JSON object on one line; keys keep the order they were added in.
class JsonLine {
 public:
  JsonLine& Add(std::string_view key, std::string_view value);
  JsonLine& Add(std::string_view key, const char* value) { return Add(key, std::string_view(value)); }
  JsonLine& Add(std::string_view key, double value);  // non-finite values become null
  JsonLine& Add(std::string_view key, std::int64_t value);
  JsonLine& Add(std::string_view key, int value) { return Add(key, static_cast<std::int64_t>(value)); }
  JsonLine& Add(std::string_view key, bool value);
  JsonLine& AddNull(std::string_view key);
  JsonLine& Add(std::string_view key, const std::vector<double>& values);  // a list of numbers
  std::string str() const { return text_ + "}"; }

 private:
  void Key(std::string_view key);
  std::string text_ = "{";
};

// A JSON string literal for `text`, quotes included, with control characters escaped.
std::string JsonString(std::string_view text);

std::string ToJson(const Row& row);
// {"summary": true, "name", "mode", "rounds", "median_ms", "median_roofline_fraction" (decode), then the
// per-round lists "median_ms_per_round", "roofline_fraction_per_round", "read_bandwidth_gbps_per_round"}.
std::string ToJson(const CaseRounds& rounds);

// The table: a header, then one line per row as rows complete; after the rounds, one summary line per case.
void PrintTableHeader(std::ostream& out);
void PrintTableRow(std::ostream& out, const Row& row);
void PrintSummaryRow(std::ostream& out, const CaseRounds& rounds);

}  // namespace flashattn::bench

#endif  // FLASHATTN_BENCH_REPORT_H_
