// The two renderings of a benchmark row: the JSON line scripts read, and the table line people read.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "bench/report.h"

namespace flashattn::bench {
namespace {

Row ExampleRow() {
  Row row;
  row.config.batch = 1;
  row.config.heads = 8;
  row.config.heads_kv = 8;
  row.config.seqlen_q = row.config.seqlen_k = 4096;
  row.config.headdim = 128;
  row.config.causal = false;
  row.config.threads = 2;
  row.flops = CountFlops(row.config);  // 68.72 GFLOP
  row.timing = {500.0, 490.0, 520.0, 5, 1200.0};
  row.peak_gflops = 200.0;
  row.peak_cpu_gflops = 196.0;
  row.peak_target = "AVX2";
  BaselineResult baseline;
  baseline.timing = {650.0, 640.0, 700.0, 5, 1500.0};
  baseline.arrangement = "heads-parallel";
  baseline.blas_core = "SkylakeX";
  baseline.medians_ms = {{"heads-parallel", 650.0}, {"threaded-blas", 700.0}};
  row.baseline = baseline;
  row.max_abs_diff_vs_baseline = 1.5e-6;
  row.tensor_bytes = 4 * 4096 * 8 * 128 * 4 + 8 * 4096 * 4;
  return row;
}

TEST(BenchReport, DerivedRatesFollowFromTheMedians) {
  const Row row = ExampleRow();
  EXPECT_NEAR(row.Gflops(), 68.719476736 / 0.5, 1e-9);
  EXPECT_NEAR(row.PeakFraction(), 68.719476736 / 0.5 / 200.0, 1e-12);
  EXPECT_NEAR(*row.BaselineGflops(), 68.719476736 / 0.65, 1e-9);
  EXPECT_NEAR(*row.SpeedupVsBaseline(), 1.3, 1e-12);
  EXPECT_NEAR(row.CpuGflops(), 68.719476736 / (1.2 / 2), 1e-9);  // 1.2 CPU-seconds on 2 threads
  EXPECT_NEAR(row.CpuPeakFraction(), 68.719476736 / 0.6 / 196.0, 1e-12);
  EXPECT_NEAR(*row.CpuSpeedupVsBaseline(), 1.25, 1e-12);
}

TEST(BenchReport, JsonLineHasEveryRequiredFieldInOrder) {
  EXPECT_EQ(
      ToJson(ExampleRow()),
      "{\"name\": \"forward_default_f32_b1_h8_hkv8_nq4096_nk4096_d128\", \"mode\": \"forward\", "
      "\"algorithm\": \"default\", \"batch\": 1, \"heads\": 8, \"heads_kv\": 8, \"seqlen_q\": 4096, "
      "\"seqlen_k\": 4096, \"headdim\": 128, \"causal\": false, \"dtype\": \"f32\", \"threads\": 2, "
      "\"runs\": 5, \"median_ms\": 500, \"min_ms\": 490, \"max_ms\": 520, \"gflops\": 137.439, "
      "\"peak_gflops\": 200, \"peak_target\": \"AVX2\", \"peak_fraction\": 0.687195, "
      "\"median_cpu_ms\": 1200, \"cpu_gflops\": 114.532, \"peak_cpu_gflops\": 196, "
      "\"cpu_peak_fraction\": 0.584349, "
      "\"baseline_median_ms\": 650, \"baseline_gflops\": 105.722, \"baseline_arrangement\": "
      "\"heads-parallel\", \"baseline_blas_core\": \"SkylakeX\", "
      "\"baseline_heads-parallel_median_ms\": 650, \"baseline_threaded-blas_median_ms\": 700, "
      "\"speedup_vs_baseline\": 1.3, \"baseline_median_cpu_ms\": 1500, \"cpu_speedup_vs_baseline\": 1.25, "
      "\"max_abs_diff_vs_baseline\": 1.5e-06, \"tensor_bytes\": 67239936}");
}

TEST(BenchReport, JsonLineWithoutBaselineHasNullsAndTheReason) {
  Row row = ExampleRow();
  row.baseline.reset();
  row.max_abs_diff_vs_baseline.reset();
  row.peak_rss_growth_bytes = 3 << 20;
  row.note = "threaded-blas baseline skipped: needs \"16384\" MiB";
  const std::string json = ToJson(row);
  EXPECT_NE(json.find("\"baseline_median_ms\": null"), std::string::npos) << json;
  EXPECT_NE(json.find("\"speedup_vs_baseline\": null"), std::string::npos) << json;
  EXPECT_NE(json.find("\"peak_rss_growth_bytes\": 3145728"), std::string::npos) << json;
  EXPECT_NE(json.find("\"note\": \"threaded-blas baseline skipped: needs \\\"16384\\\" MiB\"}"),
            std::string::npos)
      << json;
  EXPECT_EQ(json.find('\n'), std::string::npos);
}

Row DecodeRow() {
  Row row;
  row.config.mode = Mode::kDecode;
  row.config.heads = 32;
  row.config.heads_kv = 8;
  row.config.seqlen_q = 1;
  row.config.seqlen_k = 32768;
  row.config.headdim = 128;
  row.config.dtype = DType::kF16;
  row.config.threads = 2;
  row.flops = CountFlops(row.config);
  row.timing = {8.0, 7.5, 9.0, 60, 16.0};
  row.peak_gflops = 200.0;
  Traffic traffic;
  traffic.bytes_read = 134217728;  // 128 MiB
  traffic.triad_gbs = 24.0;
  traffic.read_gbs = 32.0;
  traffic.num_splits = 2;
  traffic.baseline_cache = "f32 contiguous copy of the f16 cache";
  row.traffic = traffic;
  BaselineResult baseline;
  baseline.timing = {16.0, 15.0, 17.0, 30, 32.0};
  baseline.arrangement = "heads-parallel";
  baseline.blas_core = "SkylakeX";
  row.baseline = baseline;
  return row;
}

TEST(BenchReport, DecodeRowRatesBytesAgainstTheMeasuredBandwidth) {
  const Row row = DecodeRow();
  EXPECT_NEAR(row.Gbps(), 134217728 / 8e-3 * 1e-9, 1e-9);  // 16.78 GB/s
  EXPECT_NEAR(row.BandwidthFraction(), 134217728 / 8e-3 * 1e-9 / 24.0, 1e-12);  // of the triad
  EXPECT_NEAR(row.ReadBandwidthFraction(), 134217728 / 8e-3 * 1e-9 / 32.0, 1e-12);
  EXPECT_NEAR(*row.BaselineGbps(), 134217728 / 16e-3 * 1e-9, 1e-9);
  EXPECT_EQ(ExampleRow().Gbps(), 0);  // forward rows have no traffic
  EXPECT_EQ(ExampleRow().BaselineGbps(), std::nullopt);
}

TEST(BenchReport, DecodeJsonHasTheTrafficFields) {
  const std::string json = ToJson(DecodeRow());
  for (const char* field :
       {"\"mode\": \"decode\"", "\"cache_len\": 32768", "\"num_splits\": 2", "\"page_size\": 0",
        "\"bytes_read\": 134217728", "\"gbps\": 16.7772", "\"bandwidth_gbps\": 24", "\"read_bandwidth_gbps\": 32",
        "\"bandwidth_fraction\": 0.699051", "\"read_bandwidth_fraction\": 0.524288", "\"baseline_gbps\": 8.38861", "\"speedup_vs_baseline\": 2",
        "\"baseline_cache\": \"f32 contiguous copy of the f16 cache\""})
    EXPECT_NE(json.find(field), std::string::npos) << field << " not in " << json;
  EXPECT_EQ(ToJson(ExampleRow()).find("bytes_read"), std::string::npos);
  std::ostringstream line;
  PrintTableRow(line, DecodeRow());
  EXPECT_NE(line.str().find("16.8 GB/s = 70% of triad 24.0 GB/s, 52% of read 32.0, splits 2"), std::string::npos)
      << line.str();
}

// A decode row with its roofline: 4 ms of memory traffic against 8 ms measured is a fraction of 0.5.
Row RooflineRow() {
  Row row = DecodeRow();
  row.traffic->int8_dot_gops = 1600.0;
  row.traffic->roofline = Roofline{.memory_ms = 4.0, .arithmetic_ms = 1.5, .bound = RooflineBound::kBandwidth};
  return row;
}

TEST(BenchReport, DecodeRowsCarryTheirRooflineInJsonAndTable) {
  const Row row = RooflineRow();
  EXPECT_EQ(row.RooflineFraction(), 0.5);
  const std::string json = ToJson(row);
  for (const char* field :
       {"\"bytes_read\": 134217728", "\"read_bandwidth_gbps\": 32", "\"int8_dot_peak_gops\": 1600",
        "\"roofline_ms\": 4", "\"roofline_memory_ms\": 4", "\"roofline_arithmetic_ms\": 1.5",
        "\"roofline_bound\": \"bandwidth\"", "\"roofline_fraction\": 0.5"})
    EXPECT_NE(json.find(field), std::string::npos) << field << " not in " << json;
  EXPECT_EQ(json.find("\"round\""), std::string::npos) << json;  // one round: no round field
  std::ostringstream line;
  PrintTableRow(line, row);
  EXPECT_NE(line.str().find("splits 2; roofline 4.00 ms (bandwidth): 50%"), std::string::npos) << line.str();

  // Without a roofline (a limit not measured), the fields are there and null.
  Row without = DecodeRow();
  const std::string null_json = ToJson(without);
  for (const char* field : {"\"roofline_ms\": null", "\"roofline_bound\": null", "\"roofline_fraction\": null",
                            "\"int8_dot_peak_gops\": null"})
    EXPECT_NE(null_json.find(field), std::string::npos) << field << " not in " << null_json;
  EXPECT_EQ(without.RooflineFraction(), std::nullopt);
  EXPECT_EQ(ToJson(ExampleRow()).find("roofline"), std::string::npos);  // forward rows have none
}

TEST(BenchReport, DrawnCacheLengthsAreReportedWithTheirSeed) {
  Row row = RooflineRow();
  row.config.batch = 4;
  row.config.cache_len_min = 100;
  row.config.seqlen_k = 200;
  row.config.seed = 5;
  const std::string keys = std::to_string(TotalCacheLength(row.config));
  const std::string json = ToJson(row);
  const std::string name = "\"name\": \"decode_default_f16_b4_h32_hkv8_nq1_nk100-200_d128_seed5\"";
  for (const std::string& field : {std::string("\"cache_len_min\": 100"), std::string("\"cache_len_max\": 200"),
                                   std::string("\"cache_len_seed\": 5"), "\"cache_keys_total\": " + keys, name})
    EXPECT_NE(json.find(field), std::string::npos) << field << " not in " << json;
  std::ostringstream line;
  PrintTableRow(line, row);
  EXPECT_NE(line.str().find("cache lengths 100-200 (seed 5, " + keys + " keys)"), std::string::npos) << line.str();
}

// Three rounds of one case: each row carries its round, and the summary the medians over the rounds.
TEST(BenchReport, RoundsSummaryTakesTheMediansOverTheRounds) {
  CaseRounds rounds;
  const double medians[] = {8.0, 10.0, 5.0};
  const double read_gbs[] = {32.0, 30.0, 34.0};
  for (int i = 0; i < 3; ++i) {
    Row row = RooflineRow();
    row.round = i + 1;
    row.timing.median_ms = medians[i];
    row.traffic->read_gbs = read_gbs[i];
    row.traffic->roofline->memory_ms = 4.0 * i + 1.0;  // fractions 1/8, 5/10, 9/5
    row.traffic->roofline->arithmetic_ms = 0.5;
    rounds.rows.push_back(row);
  }
  EXPECT_EQ(rounds.MedianMs(), 8.0);
  EXPECT_EQ(rounds.MedianRooflineFraction(), 0.5);
  EXPECT_NE(ToJson(rounds.rows[1]).find("\"threads\": 2, \"round\": 2, "), std::string::npos);
  EXPECT_EQ(ToJson(rounds),
            "{\"summary\": true, \"name\": \"decode_default_f16_b1_h32_hkv8_nq1_nk32768_d128\", \"mode\": \"decode\", "
            "\"rounds\": 3, \"median_ms\": 8, \"median_roofline_fraction\": 0.5, "
            "\"median_ms_per_round\": [8, 10, 5], \"roofline_fraction_per_round\": [0.125, 0.5, 1.8], "
            "\"read_bandwidth_gbps_per_round\": [32, 30, 34]}");
  std::ostringstream line;
  PrintSummaryRow(line, rounds);
  EXPECT_EQ(line.str(),
            "summary decode_default_f16_b1_h32_hkv8_nq1_nk32768_d128: 3 rounds, median 8.00 ms, roofline fraction "
            "50% (rounds: 8.00 ms 12%, 10.00 ms 50%, 5.00 ms 180%)\n");
  rounds.rows[1].traffic->roofline.reset();  // a round without a roofline: no median fraction
  EXPECT_EQ(rounds.MedianRooflineFraction(), std::nullopt);
  EXPECT_NE(ToJson(rounds).find("\"median_roofline_fraction\": null"), std::string::npos);
  EXPECT_NE(ToJson(rounds).find("[0.125, null, 1.8]"), std::string::npos) << ToJson(rounds);
}

TEST(BenchReport, JsonEscapesStringsAndWritesNonFiniteAsNull) {
  EXPECT_EQ(JsonString("a\"b\\c\nd\x01"), "\"a\\\"b\\\\c\\nd\\u0001\"");
  JsonLine json;
  json.Add("nan", std::nan(""))
      .Add("inf", 1.0 / 0.0)
      .Add("x", 0.25)
      .Add("n", std::int64_t{-3})
      .Add("t", true);
  EXPECT_EQ(json.str(), "{\"nan\": null, \"inf\": null, \"x\": 0.25, \"n\": -3, \"t\": true}");
  EXPECT_EQ(JsonLine().Add("list", std::vector<double>{1.5, std::nan(""), 2}).Add("empty", std::vector<double>{}).str(),
            "{\"list\": [1.5, null, 2], \"empty\": []}");
  EXPECT_EQ(JsonLine().str(), "{}");
}

TEST(BenchReport, TableRowAlignsUnderTheHeader) {
  std::ostringstream header, line;
  PrintTableHeader(header);
  PrintTableRow(line, ExampleRow());
  EXPECT_EQ(
      line.str(),
      "forward  default   f32    1    8    8   4096   4096  128 full    2     500.00    137.4  68.7%     "
      "650.00 heads-parallel   1.30x |    114.5  58.4%   1.25x\n");
  EXPECT_EQ(header.str().size(), line.str().size()) << header.str() << line.str();
}

}  // namespace
}  // namespace flashattn::bench
