// The decode and backward baselines of `flashattn bench` compute what the library computes: the unfused
// OpenBLAS decode against flashattn::decode (float32 cache, GQA, several query rows under the causal mask,
// sequences of different lengths, an empty one), and the OpenBLAS standard backward against the float64
// oracle's gradients (shapes with tails, Nq ≠ Nk under the causal mask, GQA, d ≠ dv, three element types), in
// both threading arrangements. Also the decode parameters the benchmark builds (contiguous and paged), and
// each mode's row end to end on a tiny shape: the JSON fields of bench/report.h, the FLOPs (2.5× the
// forward's for the backward pass), a decode row's bytes, bandwidth fractions and roofline, with one cache
// length or each sequence's own.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backward_test_problem.h"
#include "bench/backward_baseline.h"
#include "bench/decode_baseline.h"
#include "bench/mode_common.h"
#include "bench/modes.h"
#include "bench/report.h"

namespace flashattn::bench {
namespace {

const BaselineArrangement kArrangements[] = {BaselineArrangement::kHeadsParallel,
                                             BaselineArrangement::kThreadedBlas};

struct DecodeShape {
  std::int64_t batch, seqlen_q, heads_q, heads_kv, head_dim, cache_max;
  std::vector<std::int32_t> seqlens;
  bool causal;
};

TEST(DecodeBaseline, EqualsFlashattnDecodeOnAFloat32Cache) {
  const DecodeShape shapes[] = {
      {1, 1, 8, 2, 64, 300, {300}, false},
      {2, 3, 4, 1, 40, 130, {130, 77}, true},   // speculative rows, causal, GQA 4:1
      {3, 1, 2, 2, 17, 50, {0, 50, 9}, false},  // an empty sequence: O = 0, LSE = −inf
  };
  for (const DecodeShape& s : shapes) {
    const std::int64_t q_elems = s.batch * s.seqlen_q * s.heads_q * s.head_dim;
    const std::int64_t cache_elems = s.batch * s.cache_max * s.heads_kv * s.head_dim;
    std::vector<std::uint16_t> q = RandomElements(q_elems, DType::kF32, 11);
    std::vector<std::uint16_t> k = RandomElements(cache_elems, DType::kF32, 12);
    std::vector<std::uint16_t> v = RandomElements(cache_elems, DType::kF32, 13);
    std::vector<float> o_lib(q_elems), o_base(q_elems);
    std::vector<float> lse_lib(s.batch * s.heads_q * s.seqlen_q), lse_base(lse_lib.size());
    DecodeParams p;
    p.batch = s.batch;
    p.seqlen_q = s.seqlen_q;
    p.heads_q = s.heads_q;
    p.heads_kv = s.heads_kv;
    p.head_dim = s.head_dim;
    p.cache_seqlen_max = s.cache_max;
    p.cache_seqlens = s.seqlens.data();
    p.causal = s.causal;
    p.num_threads = 2;
    p.set_contiguous_strides();
    p.q = q.data();
    p.k_cache = k.data();
    p.v_cache = v.data();
    p.o = o_lib.data();
    p.lse = lse_lib.data();
    decode(p);

    DecodeBaselineProblem problem = BaselineProblemOf(p, s.cache_max);
    problem.q = reinterpret_cast<const float*>(q.data());
    problem.k = reinterpret_cast<const float*>(k.data());
    problem.v = reinterpret_cast<const float*>(v.data());
    problem.o = o_base.data();
    problem.lse = lse_base.data();
    for (BaselineArrangement arrangement : kArrangements) {
      std::fill(o_base.begin(), o_base.end(), std::numeric_limits<float>::quiet_NaN());
      std::fill(lse_base.begin(), lse_base.end(), std::numeric_limits<float>::quiet_NaN());
      BlasDecodeBaseline baseline(problem, arrangement);
      baseline.Run();
      const std::string what = "batch " + std::to_string(s.batch) + " Nq " + std::to_string(s.seqlen_q) +
                               " " + std::string(ToString(arrangement));
      EXPECT_LE(MaxAbsDiff(o_lib.data(), DType::kF32, o_base.data(), DType::kF32, q_elems), 2e-6) << what;
      for (std::size_t r = 0; r < lse_lib.size(); ++r) {
        if (std::isinf(lse_lib[r])) EXPECT_EQ(lse_base[r], lse_lib[r]) << what << " row " << r;
        else EXPECT_NEAR(lse_base[r], lse_lib[r], 2e-5) << what << " row " << r;
      }
    }
  }
}

TEST(DecodeBaseline, ScratchIsTheGroupScoresPerWorker) {
  DecodeBaselineProblem p;
  p.heads_q = 32;
  p.heads_kv = 8;
  p.cache_seqlen_max = 32768;
  p.num_threads = 2;
  const std::int64_t scores = std::int64_t{4} * 32768 * 4;  // G = 4 rows of N floats
  EXPECT_EQ(BlasDecodeBaseline::ScratchBytes(p, BaselineArrangement::kThreadedBlas), scores);
  EXPECT_EQ(BlasDecodeBaseline::ScratchBytes(p, BaselineArrangement::kHeadsParallel), 2 * scores);
}

TEST(DecodeMode, ParamsDescribeTheCaseContiguousAndPaged) {
  BenchCase c{.mode = Mode::kDecode, .batch = 2, .heads = 8, .heads_kv = 2, .seqlen_q = 1, .seqlen_k = 1000,
              .headdim = 64, .dtype = DType::kF16, .threads = 2, .num_splits = 3};
  std::vector<std::int32_t> seqlens, table;
  DecodeParams p = DecodeParamsOf(c, &seqlens, &table);
  EXPECT_EQ(seqlens, std::vector<std::int32_t>(2, 1000));
  EXPECT_FALSE(p.paged());
  EXPECT_EQ(p.cache_seqlen_max, 1000);
  EXPECT_EQ(p.cache_strides.seq, 2 * 64);
  EXPECT_EQ(p.num_splits, 3);
  EXPECT_EQ(p.cache_dtype, DType::kF16);

  c.page_size = 16;
  p = DecodeParamsOf(c, &seqlens, &table);
  ASSERT_TRUE(p.paged());
  EXPECT_EQ(p.max_pages, 63);  // ⌈1000 / 16⌉
  EXPECT_EQ(p.num_pages, 126);
  EXPECT_EQ(p.cache_strides.batch, 16 * 2 * 64);  // the page stride
  // The table is a permutation of every page, not in order (pages are scattered as in a real server).
  ASSERT_EQ(table.size(), 126u);
  EXPECT_EQ(std::set<std::int32_t>(table.begin(), table.end()).size(), 126u);
  EXPECT_EQ(*std::min_element(table.begin(), table.end()), 0);
  EXPECT_EQ(*std::max_element(table.begin(), table.end()), 125);
  EXPECT_FALSE(std::is_sorted(table.begin(), table.end()));
}

// Drawn lengths: each sequence has the pages of its own length, all pages once in a shuffled order; a contiguous
// cache has the capacity of the longest.
TEST(DecodeMode, ParamsGiveEachSequenceItsOwnLengthAndPages) {
  BenchCase c{.mode = Mode::kDecode, .batch = 6, .heads = 4, .heads_kv = 2, .seqlen_q = 1, .seqlen_k = 700,
              .headdim = 32, .dtype = DType::kBF16, .threads = 2, .page_size = 16, .cache_len_min = 20};
  std::vector<std::int32_t> seqlens, table;
  DecodeParams p = DecodeParamsOf(c, &seqlens, &table);
  const std::vector<std::int64_t> lengths = CacheLengths(c);
  ASSERT_EQ(seqlens, std::vector<std::int32_t>(lengths.begin(), lengths.end()));
  const std::int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  EXPECT_EQ(p.max_pages, (longest + 15) / 16);
  EXPECT_EQ(p.block_table_stride, p.max_pages);
  std::int64_t pages = 0;
  std::vector<std::int32_t> used;
  for (std::int64_t b = 0; b < c.batch; ++b) {
    const std::int64_t n = (lengths[b] + 15) / 16;
    pages += n;
    used.insert(used.end(), table.begin() + b * p.max_pages, table.begin() + b * p.max_pages + n);
  }
  EXPECT_EQ(p.num_pages, pages);
  EXPECT_LT(pages, c.batch * p.max_pages);  // fewer than every sequence at the longest length
  std::vector<std::int32_t> sorted = used;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::int32_t> every(static_cast<std::size_t>(pages));
  std::iota(every.begin(), every.end(), 0);
  EXPECT_EQ(sorted, every);  // each page once
  EXPECT_FALSE(std::is_sorted(used.begin(), used.end()));

  c.page_size = 0;
  p = DecodeParamsOf(c, &seqlens, &table);
  EXPECT_EQ(p.cache_seqlen_max, longest);
}

// Relative gradient error of the baseline against the oracle; the baseline rounds its gradients once to the
// element type, and its float32 arithmetic adds far less than that rounding.
double Tolerance(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 2e-5;
    case DType::kF16: return 4e-3;
    case DType::kBF16: return 3e-2;
  }
  return 0;
}

TEST(BackwardBaseline, AgreesWithTheOracleOnEveryShapeTheBenchmarkVaries) {
  struct Case {
    testing::Shape shape;
    bool causal;
  };
  const Case cases[] = {
      {{.batch = 1, .Nq = 64, .Nk = 64, .Hq = 2, .Hkv = 2, .d = 32, .dv = 32}, false},
      {{.batch = 2, .Nq = 37, .Nk = 53, .Hq = 3, .Hkv = 3, .d = 19, .dv = 19}, true},
      {{.batch = 1, .Nq = 53, .Nk = 37, .Hq = 4, .Hkv = 2, .d = 24, .dv = 24}, true},  // 16 rows see no key
      {{.batch = 1, .Nq = 33, .Nk = 45, .Hq = 4, .Hkv = 1, .d = 16, .dv = 40}, false},  // MQA, d ≠ dv
  };
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (const Case& c : cases) {
      testing::Shape shape = c.shape;
      shape.dtype = dtype;
      testing::Modifiers modifiers;
      modifiers.causal = c.causal;
      testing::BackwardProblem problem(shape, modifiers, /*seed=*/5);
      problem.params().attention.num_threads = 2;
      for (BaselineArrangement arrangement : kArrangements) {
        problem.ResetGradients();
        BlasBackwardBaseline baseline(problem.params(), arrangement);
        baseline.Run();
        const testing::GradientErrors e = testing::CompareGradientsWithOracle(problem);
        const std::string what = shape.ToString() + " " + modifiers.ToString() + " " +
                                 std::string(ToString(arrangement));
        EXPECT_LE(e.dq, Tolerance(dtype)) << what;
        EXPECT_LE(e.dk, Tolerance(dtype)) << what;
        EXPECT_LE(e.dv, Tolerance(dtype)) << what;
      }
    }
  }
}

TEST(BackwardBaseline, RejectsWhatItDoesNotImplement) {
  testing::Modifiers softcap;
  softcap.softcap = 30.0f;
  testing::BackwardProblem problem({.Nq = 4, .Nk = 4, .d = 8, .dv = 8}, softcap, 1);
  problem.params().attention.num_threads = 1;
  EXPECT_THROW(BlasBackwardBaseline(problem.params(), BaselineArrangement::kHeadsParallel), Error);
}

TEST(BackwardBaseline, ScratchIsPAndDsPerWorker) {
  BackwardParams p;
  p.attention.batch = 1;
  p.attention.heads_q = p.attention.heads_kv = 8;
  p.attention.seqlen_q = p.attention.seqlen_k = 2048;
  p.attention.head_dim = 128;
  p.attention.num_threads = 2;
  const std::int64_t per_worker = (2 * std::int64_t{2048} * 2048 + 2048) * 4;  // P, dS and D
  EXPECT_EQ(BlasBackwardBaseline::ScratchBytes(p, BaselineArrangement::kThreadedBlas), per_worker);
  EXPECT_EQ(BlasBackwardBaseline::ScratchBytes(p, BaselineArrangement::kHeadsParallel), 2 * per_worker);
}

// The number after "key": in a JSON line of ToJson, or nullopt when the key is absent or its value is null.
std::optional<double> JsonNumber(const std::string& json, const std::string& key) {
  const std::string quoted = "\"" + key + "\": ";
  const std::size_t at = json.find(quoted);
  if (at == std::string::npos) return std::nullopt;
  const char* begin = json.c_str() + at + quoted.size();
  char* end = nullptr;
  const double value = std::strtod(begin, &end);
  if (end == begin) return std::nullopt;
  return value;
}

// A relative comparison for values that went through the JSON line's 6 significant digits.
void ExpectJsonNear(const std::string& json, const std::string& key, double expected) {
  const std::optional<double> value = JsonNumber(json, key);
  ASSERT_TRUE(value.has_value()) << key << " missing or null in " << json;
  EXPECT_NEAR(*value, expected, 1e-5 * std::abs(expected)) << key << " in " << json;
}

// The shape fields every row carries, as the case gave them.
void ExpectShapeFields(const std::string& json, const BenchCase& c) {
  EXPECT_NE(json.find("\"name\": \"" + c.Name() + "\""), std::string::npos);
  EXPECT_EQ(JsonNumber(json, "batch"), c.batch);
  EXPECT_EQ(JsonNumber(json, "heads"), c.heads);
  EXPECT_EQ(JsonNumber(json, "heads_kv"), c.heads_kv);
  EXPECT_EQ(JsonNumber(json, "seqlen_q"), c.seqlen_q);
  EXPECT_EQ(JsonNumber(json, "seqlen_k"), c.seqlen_k);
  EXPECT_EQ(JsonNumber(json, "headdim"), c.headdim);
  EXPECT_NE(json.find(std::string("\"causal\": ") + (c.causal ? "true" : "false")), std::string::npos);
  EXPECT_NE(json.find("\"dtype\": \"" + std::string(to_string(c.dtype)) + "\""), std::string::npos);
  EXPECT_EQ(JsonNumber(json, "threads"), c.threads);
}

// A made-up FMA peak (40 GFLOP/s, 50 per CPU-second): the rows' fractions are checked against it, nothing
// is timed against it.
Limits MadeUpLimits() {
  Limits limits;
  limits.peak.gflops = 40.0;
  limits.peak.cpu_gflops = 50.0;
  limits.peak.target = "TEST";
  return limits;
}

// Three timed calls after a warm-up, however short.
RunOptions ThreeCalls() {
  RunOptions options;
  options.timing = {.repeats = 3, .min_time_s = 0.0, .max_repeats = 3, .warmup = true};
  return options;
}

// The small GQA shape the forward and backward rows run: batch 2, Hq 4, Hkv 2, Nq 37, Nk 53, d 24, 2 threads.
BenchCase SmallCase(Mode mode, bool causal) {
  return {.mode = mode, .batch = 2, .heads = 4, .heads_kv = 2, .seqlen_q = 37, .seqlen_k = 53, .headdim = 24,
          .causal = causal, .threads = 2};
}

TEST(ForwardMode, RowHasTheIssueFieldsAndAgreesWithTheBaseline) {
  const Limits limits = MadeUpLimits();
  for (bool causal : {false, true}) {
    const BenchCase c = SmallCase(Mode::kForward, causal);
    const Row row = RunForward(c, ThreeCalls(), limits);
    const std::string json = ToJson(row);
    SCOPED_TRACE(json);
    EXPECT_NE(json.find("\"mode\": \"forward\""), std::string::npos);
    ExpectShapeFields(json, c);

    const double flops = 4.0 * 2 * 4 * 37 * 53 * 24 / (causal ? 2 : 1);  // 4·b·h·Nq·Nk·d, halved for causal
    EXPECT_EQ(row.flops, flops);
    ASSERT_GT(row.timing.median_ms, 0.0);
    ExpectJsonNear(json, "median_ms", row.timing.median_ms);
    ExpectJsonNear(json, "gflops", flops / (row.timing.median_ms * 1e6));
    ExpectJsonNear(json, "peak_fraction", flops / (row.timing.median_ms * 1e6) / 40.0);

    ASSERT_TRUE(row.baseline.has_value()) << row.note;
    ExpectJsonNear(json, "baseline_median_ms", row.baseline->timing.median_ms);
    ExpectJsonNear(json, "speedup_vs_baseline", row.baseline->timing.median_ms / row.timing.median_ms);
    const std::optional<double> diff = JsonNumber(json, "max_abs_diff_vs_baseline");
    ASSERT_TRUE(diff.has_value());
    EXPECT_LE(*diff, 1e-5);  // float32 outputs of unit-variance inputs, both exact attention
    EXPECT_EQ(json.find("bytes_read"), std::string::npos);  // a decode row's field only
  }
}

TEST(DecodeMode, RowReportsTheBytesReadAndItsFractionsOfTheMeasuredBandwidth) {
  Limits limits = MadeUpLimits();  // and made-up bandwidths, which the row divides by as well
  limits.bandwidth = measure::Bandwidth{.read_gbs = 20.0, .triad_gbs = 25.0, .threads = 2, .array_bytes = 1};
  for (std::int64_t page_size : {0, 16}) {
    const BenchCase c{.mode = Mode::kDecode, .batch = 2, .heads = 4, .heads_kv = 2, .seqlen_q = 1, .seqlen_k = 300,
                      .headdim = 24, .dtype = DType::kF16, .threads = 2, .num_splits = 3, .page_size = page_size};
    const Row row = RunDecode(c, ThreeCalls(), limits);
    const std::string json = ToJson(row);
    SCOPED_TRACE(json);
    EXPECT_NE(json.find("\"mode\": \"decode\""), std::string::npos);
    ExpectShapeFields(json, c);
    EXPECT_EQ(JsonNumber(json, "page_size"), page_size);
    EXPECT_EQ(JsonNumber(json, "num_splits"), 3);

    // K and V: b · N · Hkv · d float16 elements each; q and o: b · Hq · d each
    const double bytes = 2.0 * 2 * 300 * 2 * 24 * 2 + 2.0 * 2 * 4 * 24 * 2;
    EXPECT_EQ(JsonNumber(json, "bytes_read"), bytes);
    ASSERT_GT(row.timing.median_ms, 0.0);
    const double gbps = bytes / (row.timing.median_ms * 1e-3) * 1e-9;
    ExpectJsonNear(json, "gbps", gbps);
    ExpectJsonNear(json, "bandwidth_gbps", 25.0);
    ExpectJsonNear(json, "bandwidth_fraction", gbps / 25.0);
    ExpectJsonNear(json, "read_bandwidth_fraction", gbps / 20.0);
    EXPECT_EQ(JsonNumber(json, "evicted_bytes_before_each_call"), 0);  // no evictor: a warm cache
    // The roofline: max(bytes / 20 GB/s, 2·Hq·keys·(d + dv) / 40 GFLOP/s)
    const double memory_ms = bytes / 20e9 * 1e3, arithmetic_ms = 2.0 * 4 * 2 * 300 * 48 / 40e9 * 1e3;
    ExpectJsonNear(json, "roofline_memory_ms", memory_ms);
    ExpectJsonNear(json, "roofline_arithmetic_ms", arithmetic_ms);
    ExpectJsonNear(json, "roofline_ms", std::max(memory_ms, arithmetic_ms));
    ExpectJsonNear(json, "roofline_fraction", std::max(memory_ms, arithmetic_ms) / row.timing.median_ms);
    const std::string bound = memory_ms >= arithmetic_ms ? "bandwidth" : "fma";
    EXPECT_NE(json.find("\"roofline_bound\": \"" + bound + "\""), std::string::npos);

    // The OpenBLAS decode over the cache's float32 copy: the same result up to float16 output rounding.
    ASSERT_TRUE(row.baseline.has_value()) << row.note;
    ExpectJsonNear(json, "speedup_vs_baseline", row.baseline->timing.median_ms / row.timing.median_ms);
    const std::optional<double> diff = JsonNumber(json, "max_abs_diff_vs_baseline");
    ASSERT_TRUE(diff.has_value());
    EXPECT_LE(*diff, 1e-3);
  }
}

// Each sequence with a length of its own, contiguous and paged, in a float and an int8 cache: the row counts
// the keys each holds, and the baseline (over the float32 copy of the rows each holds) agrees with the library.
TEST(DecodeMode, RowOverDrawnLengthsCountsTheirKeysAndMatchesTheBaseline) {
  Limits limits = MadeUpLimits();
  limits.bandwidth = measure::Bandwidth{.read_gbs = 20.0, .triad_gbs = 25.0, .threads = 2, .array_bytes = 1};
  limits.int8_dot_peak = measure::Int8DotPeak{.gops = 160.0};
  for (const auto& [page_size, element] : {std::pair{std::int64_t{0}, CacheElement::kFloat},
                                            std::pair{std::int64_t{16}, CacheElement::kFloat},
                                            std::pair{std::int64_t{16}, CacheElement::kInt8}}) {
    BenchCase c{.mode = Mode::kDecode, .batch = 5, .heads = 4, .heads_kv = 2, .seqlen_q = 1, .seqlen_k = 300,
                .headdim = 24, .dtype = DType::kF16, .cache_element = element, .threads = 2,
                .page_size = page_size, .cache_len_min = 10, .seed = 3};
    const Row row = RunDecode(c, ThreeCalls(), limits);
    const std::string json = ToJson(row);
    SCOPED_TRACE(json);
    const double keys = static_cast<double>(TotalCacheLength(c));
    EXPECT_LT(keys, 5.0 * 300);
    EXPECT_EQ(JsonNumber(json, "cache_keys_total"), keys);
    EXPECT_EQ(JsonNumber(json, "cache_len_min"), 10);
    EXPECT_EQ(JsonNumber(json, "bytes_read"), CountBytesRead(c));
    ExpectJsonNear(json, "int8_dot_peak_gops", 160.0);
    ExpectJsonNear(json, "gflops", 2.0 * 4 * keys * 48 / (row.timing.median_ms * 1e-3) * 1e-9);
    ASSERT_TRUE(row.baseline.has_value()) << row.note;
    const std::optional<double> diff = JsonNumber(json, "max_abs_diff_vs_baseline");
    ASSERT_TRUE(diff.has_value());
    EXPECT_LE(*diff, element == CacheElement::kInt8 ? 0.02 : 1e-3);
  }
}

// With an evictor (run before each call by TimeCalls' before_each), the row says how much it reads each time.
TEST(DecodeMode, RowWithAnEvictorReportsTheBytesItReadsBeforeEachCall) {
  const BenchCase c{.mode = Mode::kDecode, .batch = 1, .heads = 4, .heads_kv = 2, .seqlen_q = 1, .seqlen_k = 300,
                    .headdim = 24, .dtype = DType::kF16, .cache_element = CacheElement::kInt8, .threads = 2};
  RunOptions options = ThreeCalls();
  options.evictor = std::make_shared<measure::CacheEvictor>(std::int64_t{1} << 20, 2);
  const Row row = RunDecode(c, options, MadeUpLimits());
  const std::string json = ToJson(row);
  SCOPED_TRACE(json);
  EXPECT_EQ(JsonNumber(json, "evicted_bytes_before_each_call"), std::int64_t{1} << 20);
  EXPECT_EQ(row.timing.runs, 3);
  EXPECT_TRUE(JsonNumber(json, "f16_cache_median_ms").has_value());
}

// A quantized cache's row: the bytes read are its values (one byte each) and scales, and the same call over
// a float16 cache is timed in the same run for the speedup; likewise int8 with integer scores or u8-rounded
// weights of P̃V.
TEST(DecodeMode, QuantizedCacheRowsCountValuesAndScalesAndCompareWithAFloat16Cache) {
  Limits limits = MadeUpLimits();
  limits.bandwidth = measure::Bandwidth{.read_gbs = 20.0, .triad_gbs = 25.0, .threads = 2, .array_bytes = 1};
  for (const auto& [element, quantize_query, quantize_probs, group_size] :
       {std::tuple{CacheElement::kInt8, false, false, 0}, std::tuple{CacheElement::kFp8E4M3, false, false, 0},
        std::tuple{CacheElement::kInt8, true, false, 0}, std::tuple{CacheElement::kInt8, false, true, 0},
        std::tuple{CacheElement::kInt8, true, false, 8}, std::tuple{CacheElement::kFp8E4M3, false, false, 8}}) {
    BenchCase c;
    c.mode = Mode::kDecode;
    c.batch = 2, c.heads = 4, c.heads_kv = 2, c.seqlen_q = 1, c.seqlen_k = 300, c.headdim = 24;
    c.dtype = DType::kF32, c.threads = 2, c.page_size = element == CacheElement::kInt8 ? 0 : 16;
    c.cache_element = element, c.quantize_query = quantize_query, c.quantize_probs = quantize_probs;
    c.scale_group_size = group_size;
    const Row row = RunDecode(c, ThreeCalls(), limits);
    const std::string json = ToJson(row);
    SCOPED_TRACE(json);
    // Values: b · N · Hkv · d bytes each of K and V; scales: 4 bytes per (key, K/V head) for int8, or per
    // (key, K/V head, group of g features) with groups, per K/V head for FP8 without.
    const double groups = group_size > 0 ? 24.0 / group_size : 1.0;
    const bool per_token = element == CacheElement::kInt8 || group_size > 0;
    const double scales = per_token ? 4.0 * 2 * 300 * 2 * groups : 4.0 * 2;
    const double q_and_o = 2.0 * 2 * 4 * 24 * 4;  // float32
    EXPECT_EQ(JsonNumber(json, "bytes_read"), 2 * (2.0 * 300 * 2 * 24 + scales) + q_and_o);
    EXPECT_EQ(CountBytesRead(c), 2 * (2.0 * 300 * 2 * 24 + scales) + q_and_o);
    EXPECT_NE(json.find(std::string("\"cache_dtype\": \"") + std::string(to_string(element)) + "\""),
              std::string::npos);
    EXPECT_EQ(json.find("\"quantize_query_int8\": true") != std::string::npos, quantize_query);
    EXPECT_EQ(json.find("\"quantize_probs_u8\": true") != std::string::npos, quantize_probs);
    EXPECT_EQ(JsonNumber(json, "scale_group_size"), group_size > 0 ? std::optional<double>(group_size) : std::nullopt);
    std::ostringstream table;
    PrintTableRow(table, row);
    EXPECT_EQ(table.str().find(", int8 queries") != std::string::npos, quantize_query) << table.str();
    EXPECT_EQ(table.str().find(", u8 probabilities") != std::string::npos, quantize_probs) << table.str();
    EXPECT_EQ(table.str().find(", g 8") != std::string::npos, group_size > 0) << table.str();
    ASSERT_TRUE(row.traffic && row.traffic->f16_cache_median_ms);
    ExpectJsonNear(json, "speedup_vs_f16_cache", *row.traffic->f16_cache_median_ms / row.timing.median_ms);
    // The baseline reads the values before quantization: O differs by the quantization error alone.
    ASSERT_TRUE(row.baseline.has_value()) << row.note;
    const std::optional<double> diff = JsonNumber(json, "max_abs_diff_vs_baseline");
    ASSERT_TRUE(diff.has_value());
    EXPECT_LE(*diff, element == CacheElement::kInt8 ? 0.02 : 0.1);
    EXPECT_GT(*diff, 0.0);
  }
}

// With --headdim-v over a quantized cache, V is read inside the K rows with K's scales: the bytes read are one
// cache's values and scales, and the float16 cache timed beside it holds V inside K too.
TEST(DecodeMode, QuantizedValuesInsideTheKeysCountOneCache) {
  for (const auto& [element, group_size] : {std::pair{CacheElement::kInt8, 0}, std::pair{CacheElement::kInt8, 8},
                                            std::pair{CacheElement::kFp8E4M3, 0}}) {
    BenchCase c;
    c.mode = Mode::kDecode;
    c.batch = 2, c.heads = 8, c.heads_kv = 1, c.seqlen_q = 1, c.seqlen_k = 300, c.headdim = 40, c.headdim_v = 32;
    c.dtype = DType::kF32, c.threads = 2, c.cache_element = element, c.scale_group_size = group_size;
    const Row row = RunDecode(c, ThreeCalls(), MadeUpLimits());
    const std::string json = ToJson(row);
    SCOPED_TRACE(json);
    // b · N · Hkv · d bytes of values; scales per (key, K/V head) and group for int8, one per K/V head for FP8
    const double scales = element == CacheElement::kInt8 ? 4.0 * 2 * 300 * (group_size > 0 ? 40 / group_size : 1) : 4.0;
    const double q_and_o = 2.0 * 8 * (40 + 32) * 4;  // float32
    EXPECT_EQ(JsonNumber(json, "bytes_read"), 2.0 * 300 * 40 + scales + q_and_o);
    ASSERT_TRUE(row.traffic && row.traffic->f16_cache_median_ms);
  }
}

// A tiny serving step, decoding and prefill rows in one packed call: the row's tokens per second, bytes and
// roofline agree with its counts and its median.
TEST(ServeMode, RowCountsTheStepsRowsKeysAndTokensPerSecond) {
  Limits limits = MadeUpLimits();
  limits.bandwidth = measure::Bandwidth{.read_gbs = 20.0, .triad_gbs = 25.0, .threads = 2, .array_bytes = 1};
  const BenchCase c{.mode = Mode::kServe, .batch = 3, .heads = 4, .heads_kv = 2, .seqlen_q = 9, .seqlen_k = 70,
                    .headdim = 24, .causal = true, .dtype = DType::kBF16, .threads = 2, .page_size = 8,
                    .cache_len_min = 5, .prefill_seqs = 2, .prefill_chunk = 9, .prefill_prefix = 30};
  const Row row = RunServe(c, ThreeCalls(), limits);
  const std::string json = ToJson(row);
  SCOPED_TRACE(json);
  EXPECT_NE(json.find("\"mode\": \"serve\""), std::string::npos);
  ASSERT_GT(row.timing.median_ms, 0.0);
  const std::int64_t rows = 3 + 2 * 9;
  EXPECT_EQ(JsonNumber(json, "query_rows"), rows);
  ExpectJsonNear(json, "tokens_per_second", rows / (row.timing.median_ms * 1e-3));
  const double keys = static_cast<double>(TotalCacheLength(c));
  EXPECT_EQ(keys, static_cast<double>(CacheLengths(c)[0] + CacheLengths(c)[1] + CacheLengths(c)[2]) + 2 * 39);
  const double bytes = keys * 2 * 48 * 2 + rows * 4.0 * 48 * 2;  // K and V of every key once; q and o
  EXPECT_EQ(JsonNumber(json, "bytes_read"), bytes);
  const double memory_ms = bytes / 20e9 * 1e3, arithmetic_ms = 2.0 * 4 * AttendedKeys(c) * 48 / 40e9 * 1e3;
  ExpectJsonNear(json, "roofline_ms", std::max(memory_ms, arithmetic_ms));
  const std::optional<double> fraction = JsonNumber(json, "roofline_fraction");
  ASSERT_TRUE(fraction.has_value());
  ExpectJsonNear(json, "roofline_fraction", std::max(memory_ms, arithmetic_ms) / row.timing.median_ms);
  EXPECT_GT(*fraction, 0.0);
  EXPECT_LE(*fraction, 1.5);
  EXPECT_FALSE(row.baseline.has_value());
}

// The indexer's row on a tiny shape, over a paged bf16 cache and an fp8 one: its FLOPs (2·H_I·d_I per row and
// visible key, causal rows bottom-right) and their rate against the peak; no baseline.
TEST(IndexerMode, RowCountsTheScoreProductsOfEveryVisibleKey) {
  const Limits limits = MadeUpLimits();
  for (const CacheElement element : {CacheElement::kFloat, CacheElement::kFp8E4M3}) {
    const BenchCase c{.mode = Mode::kIndexer, .batch = 2, .heads = 8, .heads_kv = 1, .seqlen_q = 3, .seqlen_k = 300,
                      .headdim = 64, .causal = true, .dtype = DType::kBF16, .cache_element = element, .threads = 2,
                      .page_size = element == CacheElement::kFloat ? 16 : 0, .top_k = 50};
    const Row row = RunIndexer(c, ThreeCalls(), limits);
    const std::string json = ToJson(row);
    SCOPED_TRACE(json);
    EXPECT_NE(json.find("\"mode\": \"indexer\""), std::string::npos);
    ASSERT_GT(row.timing.median_ms, 0.0);
    EXPECT_EQ(row.flops, 2.0 * 2 * 8 * 64 * (298 + 299 + 300));
    EXPECT_GT(row.PeakFraction(), 0.0);
    EXPECT_FALSE(row.baseline.has_value());
  }
}

// The same serving step over quantized caches: the bytes are the one-byte values and the scales of the keys
// read, the integer products take the int8 dot-product peak in the roofline, as decode's rows do; the evictor
// reads its buffer before each call; no float16 cache is timed beside it.
TEST(ServeMode, QuantizedCacheRowsCountValuesAndScalesAndTakeTheIntegerPeak) {
  Limits limits = MadeUpLimits();
  limits.bandwidth = measure::Bandwidth{.read_gbs = 20.0, .triad_gbs = 25.0, .threads = 2, .array_bytes = 1};
  limits.int8_dot_peak = measure::Int8DotPeak{.gops = 160.0};
  RunOptions options = ThreeCalls();
  options.evictor = std::make_shared<measure::CacheEvictor>(std::int64_t{1} << 20, 2);
  for (const auto& [element, quantize_query, quantize_probs, group_size] :
       {std::tuple{CacheElement::kInt8, true, true, 0}, std::tuple{CacheElement::kInt8, true, false, 8},
        std::tuple{CacheElement::kFp8E4M3, false, false, 0}, std::tuple{CacheElement::kFp8E5M2, false, false, 8}}) {
    const BenchCase c{.mode = Mode::kServe, .batch = 3, .heads = 4, .heads_kv = 2, .seqlen_q = 9, .seqlen_k = 70,
                      .headdim = 24, .causal = true, .dtype = DType::kBF16, .cache_element = element,
                      .quantize_query = quantize_query, .quantize_probs = quantize_probs,
                      .scale_group_size = group_size, .threads = 2, .page_size = 8, .cache_len_min = 5,
                      .prefill_seqs = 2, .prefill_chunk = 9, .prefill_prefix = 30};
    const Row row = RunServe(c, options, limits);
    const std::string json = ToJson(row);
    SCOPED_TRACE(json);
    ASSERT_GT(row.timing.median_ms, 0.0);
    EXPECT_NE(json.find(std::string("\"cache_dtype\": \"") + std::string(to_string(element)) + "\""),
              std::string::npos);
    EXPECT_EQ(json.find("\"quantize_query_int8\": true") != std::string::npos, quantize_query);
    EXPECT_EQ(json.find("\"quantize_probs_u8\": true") != std::string::npos, quantize_probs);
    // Values: keys · Hkv · d bytes each of K and V; scales: 4 bytes per (key, K/V head, group) per token (int8,
    // or groups), else 4 per K/V head; q and o: rows · Hq · d bfloat16 elements each.
    const double keys = static_cast<double>(TotalCacheLength(c));
    const bool per_token = element == CacheElement::kInt8 || group_size > 0;
    const double scales = per_token ? 4.0 * keys * 2 * (group_size > 0 ? 24 / group_size : 1) : 4.0 * 2;
    const double bytes = 2 * (keys * 2 * 24 + scales) + (3 + 2 * 9) * 4.0 * 24 * 2 * 2;
    EXPECT_EQ(JsonNumber(json, "bytes_read"), bytes);
    ExpectJsonNear(json, "int8_dot_peak_gops", 160.0);
    // 2·Hq·attended·d multiply-adds per product, at 160 GOP/s when integer, else 40 GFLOP/s
    const double product = 2.0 * 4 * AttendedKeys(c) * 24;
    const double arithmetic_ms =
        (product / (quantize_query ? 160e9 : 40e9) + product / (quantize_probs ? 160e9 : 40e9)) * 1e3;
    ExpectJsonNear(json, "roofline_memory_ms", bytes / 20e9 * 1e3);
    ExpectJsonNear(json, "roofline_arithmetic_ms", arithmetic_ms);
    EXPECT_EQ(JsonNumber(json, "evicted_bytes_before_each_call"), std::int64_t{1} << 20);
    EXPECT_FALSE(JsonNumber(json, "f16_cache_median_ms").has_value());
    std::ostringstream table;
    PrintTableRow(table, row);
    EXPECT_NE(table.str().find(std::string(to_string(element)) + " cache"), std::string::npos) << table.str();
    EXPECT_EQ(table.str().find(", int8 queries") != std::string::npos, quantize_query) << table.str();
    EXPECT_EQ(table.str().find(", u8 probabilities") != std::string::npos, quantize_probs) << table.str();
    EXPECT_EQ(table.str().find(", g 8") != std::string::npos, group_size > 0) << table.str();
  }
}

TEST(BackwardMode, RowHasTheIssueFieldsAndCountsTwoAndAHalfForwardFlops) {
  const Limits limits = MadeUpLimits();
  for (bool causal : {false, true}) {
    const BenchCase c = SmallCase(Mode::kBackward, causal);
    const Row row = RunBackward(c, ThreeCalls(), limits);
    const std::string json = ToJson(row);
    SCOPED_TRACE(json);

    // 2.5 × the forward's 4·b·h·Nq·Nk·d, halved for causal; the same as the forward mode's count × 2.5.
    const double forward_flops = 4.0 * 2 * 4 * 37 * 53 * 24 / (causal ? 2 : 1);
    BenchCase forward_case = c;
    forward_case.mode = Mode::kForward;
    EXPECT_EQ(CountFlops(forward_case), forward_flops);
    EXPECT_EQ(row.flops, 2.5 * forward_flops);

    EXPECT_NE(json.find("\"mode\": \"backward\""), std::string::npos);
    EXPECT_NE(json.find(std::string("\"causal\": ") + (causal ? "true" : "false")), std::string::npos);
    EXPECT_EQ(row.timing.runs, 3);
    ASSERT_GT(row.timing.median_ms, 0.0);
    ExpectJsonNear(json, "median_ms", row.timing.median_ms);
    ExpectJsonNear(json, "gflops", 2.5 * forward_flops / (row.timing.median_ms * 1e6));
    ExpectJsonNear(json, "peak_gflops", 40.0);
    ExpectJsonNear(json, "peak_fraction", 2.5 * forward_flops / (row.timing.median_ms * 1e6) / 40.0);
    ExpectJsonNear(json, "cpu_peak_fraction", row.CpuGflops() / 50.0);

    // The OpenBLAS standard backward ran in the same row, on the same inputs, and agrees with the library.
    ASSERT_TRUE(row.baseline.has_value()) << row.note;
    ASSERT_GT(row.baseline->timing.median_ms, 0.0);
    ExpectJsonNear(json, "baseline_median_ms", row.baseline->timing.median_ms);
    ExpectJsonNear(json, "baseline_gflops", 2.5 * forward_flops / (row.baseline->timing.median_ms * 1e6));
    ExpectJsonNear(json, "speedup_vs_baseline", row.baseline->timing.median_ms / row.timing.median_ms);
    EXPECT_TRUE(JsonNumber(json, "cpu_speedup_vs_baseline").has_value());
    const std::optional<double> diff = JsonNumber(json, "max_abs_diff_vs_baseline");
    ASSERT_TRUE(diff.has_value());
    EXPECT_LE(*diff, 1e-4);  // float32 gradients of O(1) inputs; NaN would have been written as null

    // The caller's tensors: Q, K, V, O, dO, dQ, dK, dV in float32 and the LSE.
    const double q = 2 * 37 * 4 * 24, kv = 2 * 53 * 2 * 24;
    EXPECT_EQ(JsonNumber(json, "tensor_bytes"), 4 * (4 * q + 4 * kv + 2 * 4 * 37));
  }
}

// --sparse: the block-sparse call timed against the dense one, the visited fraction and the ratio in the note.
TEST(SparseMode, RowsNoteTheDenseTimeAndTheVisitedFraction) {
  const Limits limits = MadeUpLimits();
  for (Mode mode : {Mode::kForward, Mode::kBackward}) {
    for (Sparsity sparsity : {Sparsity::kDocuments, Sparsity::kSlidingGlobal}) {
      BenchCase c{.mode = mode, .heads = 2, .heads_kv = 1, .seqlen_q = 1100, .seqlen_k = 1100, .headdim = 16,
                  .threads = 2};
      c.sparsity = sparsity;
      const Row row =
          mode == Mode::kForward ? RunForward(c, ThreeCalls(), limits) : RunBackward(c, ThreeCalls(), limits);
      SCOPED_TRACE(row.note);
      EXPECT_FALSE(row.baseline.has_value());
      ASSERT_GT(row.timing.median_ms, 0.0);
      const std::size_t at = row.note.find("visited ");
      ASSERT_NE(at, std::string::npos);
      const double visited = std::stod(row.note.substr(at + 8));
      // 8 documents, causal, in 9 × 9 blocks: 17 of 81; a window of 512 over 1100 keys: about half.
      EXPECT_GT(visited, sparsity == Sparsity::kDocuments ? 0.05 : 0.3);
      EXPECT_LT(visited, sparsity == Sparsity::kDocuments ? 0.3 : 0.7);
      EXPECT_NE(row.note.find("dense "), std::string::npos);
      const std::size_t ratio_at = row.note.find("time/(visited·dense) ");
      const std::size_t excess_at = row.note.find("time − visited·dense = ");
      ASSERT_NE(ratio_at, std::string::npos);
      ASSERT_NE(excess_at, std::string::npos);
      // the two figures say the same: excess = (ratio − 1)·visited, in percent of the dense time, within the
      // rounding of three printed digits each
      const double ratio = std::stod(row.note.substr(ratio_at + std::string("time/(visited·dense) ").size()));
      const double excess = std::stod(row.note.substr(excess_at + std::string("time − visited·dense = ").size()));
      EXPECT_NEAR(excess, 100 * (ratio - 1) * visited, 0.5 * visited + 0.01 * std::abs(excess) + 0.01);
    }
  }
}

TEST(BackwardMode, WithoutBaselineAndWithMemoryTheRowSaysSo) {
  Limits limits;
  limits.peak.gflops = 40.0;
  RunOptions options;
  options.timing = {.repeats = 1, .min_time_s = 0.0, .max_repeats = 1, .warmup = true};
  options.baseline = false;
  options.report_memory = true;
  const BenchCase c{.mode = Mode::kBackward, .heads = 1, .heads_kv = 1, .seqlen_q = 16, .seqlen_k = 16, .headdim = 8,
                    .dtype = DType::kBF16, .threads = 1};
  const Row row = RunBackward(c, options, limits);
  const std::string json = ToJson(row);
  EXPECT_NE(json.find("\"baseline_median_ms\": null"), std::string::npos) << json;
  EXPECT_NE(json.find("\"speedup_vs_baseline\": null"), std::string::npos) << json;
  EXPECT_EQ(json.find("max_abs_diff_vs_baseline"), std::string::npos) << json;
  // Either the growth was measured, or the note says why not.
  EXPECT_TRUE(JsonNumber(json, "peak_rss_growth_bytes").has_value() ||
              json.find("peak RSS unavailable") != std::string::npos)
      << json;
  EXPECT_EQ(row.flops, 2.5 * 4 * 16 * 16 * 8);
}

}  // namespace
}  // namespace flashattn::bench
