// The benchmark's bookkeeping that needs no timing: FLOP and byte counts, cache lengths, names, the roofline,
// and which cases the options and presets select.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <tuple>

#include "bench/bench_case.h"
#include "bench/bench_command.h"
#include "bench/roofline.h"

namespace flashattn::bench {
namespace {

TEST(BenchCase, CountFlopsIsFourBHNqNkD) {
  BenchCase c{.batch = 2, .heads = 3, .seqlen_q = 5, .seqlen_k = 7, .headdim = 11};
  EXPECT_EQ(CountFlops(c), 4.0 * 2 * 3 * 5 * 7 * 11);
}

TEST(BenchCase, CountFlopsHalvesForCausal) {
  BenchCase c{.batch = 1, .heads = 8, .seqlen_q = 4096, .seqlen_k = 4096, .headdim = 128};
  const double dense = CountFlops(c);
  EXPECT_EQ(dense, 4.0 * 8 * 4096 * 4096 * 128);  // 68.7 GFLOP, the forward benchmark's shape
  c.causal = true;
  EXPECT_EQ(CountFlops(c), dense / 2);
}

TEST(BenchCase, BackwardCountsTwoAndAHalfForwardsCausalHalved) {
  BenchCase c{.mode = Mode::kBackward, .heads = 8, .seqlen_q = 2048, .seqlen_k = 2048, .headdim = 128};
  EXPECT_EQ(CountFlops(c), 2.5 * 4.0 * 8 * 2048 * 2048 * 128);  // 42.9 GFLOP, the backward benchmark's shape
  c.causal = true;
  EXPECT_EQ(CountFlops(c), 2.5 * 4.0 * 8 * 2048 * 2048 * 128 / 2);
  EXPECT_EQ(CountBytesRead(c), 0);
}

TEST(BenchCase, DecodeReadsEveryCachedKeyAndValueOnceAndQAndO) {
  BenchCase c{.mode = Mode::kDecode, .batch = 1, .heads = 32, .heads_kv = 8, .seqlen_q = 1, .seqlen_k = 32768,
              .headdim = 128, .dtype = DType::kF16};
  const double q_and_o = 2 * 32 * 128 * 2;              // one query row of 32 heads, and its output
  EXPECT_EQ(CountBytesRead(c), 128.0 * (1 << 20) + q_and_o);  // 128 MiB of K and V
  c.dtype = DType::kF32;
  EXPECT_EQ(CountBytesRead(c), 256.0 * (1 << 20) + 2 * q_and_o);
  c.batch = 3;
  c.heads_kv = 1;
  c.headdim = 64;
  c.dtype = DType::kBF16;
  EXPECT_EQ(CountBytesRead(c), 2.0 * 3 * 32768 * 1 * 64 * 2 + 2.0 * 3 * 32 * 64 * 2);
  EXPECT_EQ(CountFlops(c), 4.0 * 3 * 32 * 1 * 32768 * 64);
  c.mode = Mode::kForward;
  EXPECT_EQ(CountBytesRead(c), 0);
}

// Per-sequence lengths: keys = Σ_b N_b. A quantized cache reads keys·Hkv·d bytes of values and 4 bytes of scale
// per (key, K/V head, group) for each of K and V (once when V is inside K), or 4 per K/V head; q and o are b·Nq·Hq
// elements of d and dv.
TEST(BenchCase, DecodeBytesAndFlopsSumOverEachSequencesLength) {
  BenchCase c{.mode = Mode::kDecode, .batch = 5, .heads = 8, .heads_kv = 2, .seqlen_q = 3, .seqlen_k = 900,
              .headdim = 64, .dtype = DType::kBF16, .cache_element = CacheElement::kInt8, .scale_group_size = 16,
              .cache_len_min = 100, .seed = 7};
  const std::vector<std::int64_t> lengths = CacheLengths(c);
  ASSERT_EQ(lengths.size(), 5u);
  double keys = 0;
  for (std::int64_t n : lengths) keys += static_cast<double>(n);
  ASSERT_NE(keys, 5.0 * 900);  // drawn, not all the longest
  EXPECT_EQ(TotalCacheLength(c), keys);
  const double q_and_o = 5.0 * 3 * 8 * (64 + 64) * 2;
  const double values = keys * 2 * 64, scales = 4.0 * keys * 2 * (64 / 16);
  EXPECT_EQ(CountBytesRead(c), 2 * (values + scales) + q_and_o);
  EXPECT_EQ(CountDecodeFlops(c).scores, 2.0 * 8 * 3 * keys * 64);
  EXPECT_EQ(CountDecodeFlops(c).pv, 2.0 * 8 * 3 * keys * 64);
  EXPECT_EQ(CountFlops(c), 2.0 * 8 * 3 * keys * 128);

  c.headdim_v = 48;  // V inside K: K's values and scales only, o of dv
  EXPECT_EQ(CountBytesRead(c), values + scales + 5.0 * 3 * 8 * (64 + 48) * 2);
  EXPECT_EQ(CountDecodeFlops(c).pv, 2.0 * 8 * 3 * keys * 48);

  c.cache_element = CacheElement::kFp8E4M3;  // per head without groups: 4 bytes per K/V head
  c.scale_group_size = 0;
  EXPECT_EQ(CountBytesRead(c), values + 4.0 * 2 + 5.0 * 3 * 8 * (64 + 48) * 2);
  c.cache_element = CacheElement::kFloat;  // bf16 rows of K holding V
  EXPECT_EQ(CountBytesRead(c), keys * 2 * 64 * 2 + 5.0 * 3 * 8 * (64 + 48) * 2);
}

TEST(BenchCase, CacheLengthsAreDrawnUniformlyFromTheRangeBySeed) {
  BenchCase c{.mode = Mode::kDecode, .batch = 64, .seqlen_k = 8192, .cache_len_min = 256};
  const std::vector<std::int64_t> lengths = CacheLengths(c);
  ASSERT_EQ(lengths.size(), 64u);
  for (std::int64_t n : lengths) {
    EXPECT_GE(n, 256);
    EXPECT_LE(n, 8192);
  }
  EXPECT_GT(std::set<std::int64_t>(lengths.begin(), lengths.end()).size(), 32u);
  // The documented draw: A + x mod (B − A + 1) for the outputs x of std::mt19937_64(seed), seed 1 by default.
  std::mt19937_64 random(1);
  for (std::int64_t n : lengths) EXPECT_EQ(n, 256 + static_cast<std::int64_t>(random() % (8192 - 256 + 1)));
  EXPECT_EQ(CacheLengths(c), lengths);  // the same every time
  c.seed = 2;
  EXPECT_NE(CacheLengths(c), lengths);
  c.cache_len_min = c.seqlen_k;  // a range of one length
  EXPECT_EQ(CacheLengths(c), std::vector<std::int64_t>(64, 8192));
  c.cache_len_min = 0;  // no range: every sequence the longest
  EXPECT_EQ(CacheLengths(c), std::vector<std::int64_t>(64, 8192));
}

TEST(BenchCase, ParseCacheLenTakesNOrARangeAndNamesTheOptionAndValueOtherwise) {
  EXPECT_EQ(ParseCacheLen("32768").min, 0);
  EXPECT_EQ(ParseCacheLen("32768").max, 32768);
  EXPECT_EQ(ParseCacheLen("256:8192").min, 256);
  EXPECT_EQ(ParseCacheLen("256:8192").max, 8192);
  EXPECT_EQ(ParseCacheLen("7:7").min, 7);
  EXPECT_EQ(ParseCacheLen("1:2147483647").max, 2147483647);
  for (const char* bad : {"0", "-3", "8192:256", "0:5", "5:0", "1:", ":5", "a:b", "3.5", "1:2:3", "", " 5",
                          "2147483648", "1:4294967296", "12k"}) {
    try {
      ParseCacheLen(bad);
      ADD_FAILURE() << "'" << bad << "' accepted";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("--cache-len"), std::string::npos) << message;
      EXPECT_NE(message.find("'" + std::string(bad) + "'"), std::string::npos) << message;
    }
  }
}

// T_roof = max(B / β, F_scores / φ_scores + F_pv / φ_pv), φ the FMA peak for float products and the int8 dot
// peak for integer ones.
TEST(Roofline, TakesTheSlowerOfMemoryAndArithmeticAndNamesIt) {
  const BenchCase gqa{.mode = Mode::kDecode, .heads = 32, .heads_kv = 8, .seqlen_q = 1, .seqlen_k = 32768,
                      .headdim = 128, .dtype = DType::kF16};
  const MachineLimits limits{.read_gbs = 40, .fma_gflops = 200, .int8_dot_gops = 800};
  std::optional<Roofline> roof = DecodeRoofline(gqa, limits);
  ASSERT_TRUE(roof);
  const double bytes = CountBytesRead(gqa), flops = 2.0 * 32 * 32768 * 128;  // per product
  EXPECT_DOUBLE_EQ(roof->memory_ms, bytes / 40e9 * 1e3);
  EXPECT_DOUBLE_EQ(roof->arithmetic_ms, 2 * flops / 200e9 * 1e3);
  EXPECT_EQ(roof->bound, RooflineBound::kBandwidth);
  EXPECT_DOUBLE_EQ(roof->ms(), roof->memory_ms);

  // 128 query heads on one K/V head of d = 576 (V inside K, dv = 512): the FMAs bind
  const BenchCase mla{.mode = Mode::kDecode, .heads = 128, .heads_kv = 1, .seqlen_q = 1, .seqlen_k = 8192,
                      .headdim = 576, .headdim_v = 512, .dtype = DType::kBF16};
  roof = DecodeRoofline(mla, limits);
  ASSERT_TRUE(roof);
  EXPECT_DOUBLE_EQ(roof->arithmetic_ms, 2.0 * 128 * 8192 * (576 + 512) / 200e9 * 1e3);
  EXPECT_EQ(roof->bound, RooflineBound::kFma);
  EXPECT_DOUBLE_EQ(roof->ms(), roof->arithmetic_ms);
  EXPECT_EQ(ToString(roof->bound), "fma");
}

TEST(Roofline, IntegerProductsRunAtTheInt8DotPeak) {
  BenchCase c{.mode = Mode::kDecode, .heads = 128, .heads_kv = 1, .seqlen_q = 1, .seqlen_k = 8192, .headdim = 128,
              .dtype = DType::kF16, .cache_element = CacheElement::kInt8};
  MachineLimits limits{.read_gbs = 40, .fma_gflops = 200, .int8_dot_gops = 800};
  const double per_product = 2.0 * 128 * 8192 * 128;
  c.quantize_query = true;  // integer scores, float P̃V
  std::optional<Roofline> roof = DecodeRoofline(c, limits);
  ASSERT_TRUE(roof);
  EXPECT_DOUBLE_EQ(roof->arithmetic_ms, (per_product / 800e9 + per_product / 200e9) * 1e3);
  EXPECT_EQ(roof->bound, RooflineBound::kMixed);
  EXPECT_EQ(ToString(roof->bound), "mixed");
  c.quantize_probs = true;  // both integer
  roof = DecodeRoofline(c, limits);
  EXPECT_DOUBLE_EQ(roof->arithmetic_ms, 2 * per_product / 800e9 * 1e3);
  EXPECT_EQ(roof->bound, RooflineBound::kInt8Dot);
  EXPECT_EQ(ToString(roof->bound), "int8 dot");
  limits.integer_pv = false;  // a target that forms P̃V on FMAs
  roof = DecodeRoofline(c, limits);
  EXPECT_DOUBLE_EQ(roof->arithmetic_ms, (per_product / 800e9 + per_product / 200e9) * 1e3);
  EXPECT_EQ(roof->bound, RooflineBound::kMixed);
  c.quantize_query = c.quantize_probs = false;  // float arithmetic over the int8 cache
  roof = DecodeRoofline(c, limits);
  EXPECT_DOUBLE_EQ(roof->arithmetic_ms, 2 * per_product / 200e9 * 1e3);
  EXPECT_EQ(roof->bound, RooflineBound::kFma);
  c.heads = 1;  // one query row per key: memory binds
  roof = DecodeRoofline(c, limits);
  EXPECT_EQ(roof->bound, RooflineBound::kBandwidth);
  EXPECT_EQ(ToString(roof->bound), "bandwidth");
}

TEST(Roofline, NeedsEveryLimitItUses) {
  BenchCase c{.mode = Mode::kDecode, .heads = 8, .heads_kv = 8, .seqlen_q = 1, .seqlen_k = 100, .headdim = 64,
              .cache_element = CacheElement::kInt8};
  EXPECT_FALSE(DecodeRoofline(c, {.read_gbs = 0, .fma_gflops = 200}));
  EXPECT_FALSE(DecodeRoofline(c, {.read_gbs = 40, .fma_gflops = 0}));
  EXPECT_TRUE(DecodeRoofline(c, {.read_gbs = 40, .fma_gflops = 200}));  // float arithmetic: no int8 peak needed
  c.quantize_query = true;
  EXPECT_FALSE(DecodeRoofline(c, {.read_gbs = 40, .fma_gflops = 200}));
  EXPECT_TRUE(DecodeRoofline(c, {.read_gbs = 40, .fma_gflops = 200, .int8_dot_gops = 800}));
}

TEST(BenchCase, NameSpellsOutEveryShapeField) {
  BenchCase c{.batch = 2, .heads = 8, .heads_kv = 2, .seqlen_q = 100, .seqlen_k = 300, .headdim = 64,
              .causal = true, .dtype = DType::kBF16};
  EXPECT_EQ(c.Name(), "forward_default_bf16_b2_h8_hkv2_nq100_nk300_d64_causal");
  c.algorithm = Algorithm::kFlash1;
  c.causal = false;
  EXPECT_EQ(c.Name(), "forward_flash1_bf16_b2_h8_hkv2_nq100_nk300_d64");
  c.sparsity = Sparsity::kDocuments;
  EXPECT_EQ(c.Name(), "forward_flash1_bf16_b2_h8_hkv2_nq100_nk300_d64_docs8");
  c.sparsity = Sparsity::kSlidingGlobal;
  EXPECT_EQ(c.Name(), "forward_flash1_bf16_b2_h8_hkv2_nq100_nk300_d64_sliding512g64");
  c.sparsity = Sparsity::kNone;
  EXPECT_EQ(ParseSparsity("sliding"), Sparsity::kSlidingGlobal);
  EXPECT_THROW(ParseSparsity("dense"), Error);
  c.mode = Mode::kDecode;
  c.algorithm.reset();
  c.num_splits = 4;
  c.page_size = 256;
  EXPECT_EQ(c.Name(), "decode_default_bf16_b2_h8_hkv2_nq100_nk300_d64_splits4_paged256");
  c.cache_len_min = 20;  // lengths drawn from [20, 300]
  EXPECT_EQ(c.Name(), "decode_default_bf16_b2_h8_hkv2_nq100_nk20-300_d64_splits4_paged256_seed1");
  c.seed = 9;
  EXPECT_EQ(c.Name(), "decode_default_bf16_b2_h8_hkv2_nq100_nk20-300_d64_splits4_paged256_seed9");
}

TEST(BenchCase, ParamsAreContiguousAndValidOnceAttached) {
  BenchCase c{.heads = 4, .heads_kv = 2, .seqlen_q = 3, .seqlen_k = 5, .headdim = 8, .threads = 1};
  AttentionParams p = c.Params();
  EXPECT_EQ(p.q_strides.seq, 4 * 8);
  EXPECT_EQ(p.k_strides.seq, 2 * 8);
  std::vector<float> q(3 * 4 * 8), k(5 * 2 * 8), v(5 * 2 * 8), o(3 * 4 * 8);
  p.q = q.data();
  p.k = k.data();
  p.v = v.data();
  p.o = o.data();
  EXPECT_NO_THROW(validate(p));
}

TEST(BenchCase, ParseRejectsUnknownNamesNamingTheOption) {
  EXPECT_EQ(ParseDType("f16"), DType::kF16);
  EXPECT_EQ(ParseMode("forward"), Mode::kForward);
  EXPECT_EQ(ParseMode("decode"), Mode::kDecode);
  EXPECT_EQ(ParseMode("backward"), Mode::kBackward);
  try {
    ParseDType("f64");
    FAIL() << "f64 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--dtype"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("f64"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ParseMode("sideways"), Error);
}

TEST(PlanCases, WithoutShapeOptionsRunsTheSweepIncludingTheTargetShape) {
  BenchOptions options;
  options.threads = 2;
  const std::vector<BenchCase> cases = PlanCases(options);
  ASSERT_GT(cases.size(), 1u);
  std::set<std::string> names;
  bool target = false, target_causal = false, target_f16 = false;
  int decode_rows = 0, backward_rows = 0;
  for (const BenchCase& c : cases) {
    names.insert(c.Name());
    EXPECT_EQ(c.threads, 2);
    EXPECT_FALSE(c.algorithm.has_value());
    decode_rows += c.mode == Mode::kDecode;
    backward_rows += c.mode == Mode::kBackward;
    if (c.mode == Mode::kForward && c.batch == 1 && c.heads == 8 && c.heads_kv == 8 && c.seqlen_q == 4096 &&
        c.headdim == 128) {
      if (c.dtype == DType::kF32) (c.causal ? target_causal : target) = true;
      if (c.dtype == DType::kF16 && !c.causal) target_f16 = true;
    }
  }
  EXPECT_EQ(names.size(), cases.size()) << "two sweep cases share a name";
  EXPECT_TRUE(target && target_causal && target_f16);
  EXPECT_GE(decode_rows, 2);
  EXPECT_GE(backward_rows, 1);
}

TEST(PlanCases, DecodeTakesOneQueryRowAndTheCacheOptions) {
  BenchOptions options;
  options.single = true;
  options.mode = "decode";
  options.heads = 32;
  options.heads_kv = 8;
  options.dtype = "f16";
  options.threads = 2;
  BenchCase c = PlanCases(options)[0];
  EXPECT_EQ(c.mode, Mode::kDecode);
  EXPECT_EQ(c.seqlen_q, 1);
  EXPECT_EQ(c.seqlen_k, 32768);  // the default cache length
  EXPECT_EQ(c.num_splits, 0);
  EXPECT_EQ(c.page_size, 0);
  options.cache_len = "131072";
  options.num_splits = 8;
  options.paged = 16;
  options.seqlen = 4;  // speculative decoding
  c = PlanCases(options)[0];
  EXPECT_EQ(c.seqlen_k, 131072);
  EXPECT_EQ(c.num_splits, 8);
  EXPECT_EQ(c.page_size, 16);
  EXPECT_EQ(c.seqlen_q, 4);
  EXPECT_EQ(c.cache_len_min, 0);  // one length for every sequence
  EXPECT_FALSE(c.quantize_query);
  EXPECT_FALSE(c.quantize_probs);
  // --quantize-query (integer scores) and --quantize-probs (u8-rounded weights of P̃V): over an int8 cache
  // only, each named apart; refused for another cache
  const std::tuple<bool BenchOptions::*, bool BenchCase::*, const char*> flags[] = {
      {&BenchOptions::quantize_query, &BenchCase::quantize_query, "_cache_int8_quantize_query"},
      {&BenchOptions::quantize_probs, &BenchCase::quantize_probs, "_cache_int8_quantize_probs"}};
  for (const auto& [option, flag, suffix] : flags) {
    BenchOptions flagged = options;
    flagged.*option = true;
    EXPECT_THROW(PlanCases(flagged), Error) << suffix;
    flagged.cache_dtype = "fp8_e4m3";
    EXPECT_THROW(PlanCases(flagged), Error) << suffix;
    flagged.cache_dtype = "int8";
    c = PlanCases(flagged)[0];
    EXPECT_TRUE(c.*flag) << suffix;
    EXPECT_EQ(c.quantize_query + c.quantize_probs, 1) << suffix;
    EXPECT_EQ(c.cache_element, CacheElement::kInt8);
    EXPECT_NE(c.Name().find(suffix), std::string::npos) << c.Name();
  }
  options.quantize_query = options.quantize_probs = true;
  options.cache_dtype = "int8";
  EXPECT_NE(PlanCases(options)[0].Name().find("_cache_int8_quantize_query_quantize_probs"), std::string::npos);
  // --scale-group-size: per-token scales per group of g features of an int8 cache, g dividing d
  options.quantize_query = options.quantize_probs = false;
  EXPECT_EQ(PlanCases(options)[0].scale_group_size, 0);
  options.scale_group_size = 32;
  c = PlanCases(options)[0];
  EXPECT_EQ(c.scale_group_size, 32);
  EXPECT_NE(c.Name().find("_cache_int8_g32"), std::string::npos) << c.Name();
  for (const std::int64_t g : {0, -32, 48}) {
    options.scale_group_size = g;
    EXPECT_THROW(PlanCases(options), Error) << g;
  }
  options.scale_group_size = 32;
  options.cache_dtype = "fp8_e4m3";  // per-token scales then, as groups need
  c = PlanCases(options)[0];
  EXPECT_EQ(c.scale_group_size, 32);
  EXPECT_EQ(default_scale_granularity(c.cache_element, c.scale_group_size), ScaleGranularity::kPerToken);
  EXPECT_EQ(default_scale_granularity(c.cache_element, 0), ScaleGranularity::kPerHead);
  options.cache_dtype = "fp8_e5m2";
  c = PlanCases(options)[0];
  EXPECT_EQ(c.cache_element, CacheElement::kFp8E5M2);
  EXPECT_NE(c.Name().find("_cache_fp8_e5m2"), std::string::npos) << c.Name();
  options.cache_dtype = "fp8_e6m1";
  EXPECT_THROW(PlanCases(options), Error);
  options.cache_dtype.clear();
  EXPECT_THROW(PlanCases(options), Error);
}

TEST(PlanCases, BackwardTakesTheForwardShapeOptions) {
  BenchOptions options;
  options.single = true;
  options.mode = "backward";
  options.seqlen = 2048;
  options.causal = true;
  const BenchCase c = PlanCases(options)[0];
  EXPECT_EQ(c.mode, Mode::kBackward);
  EXPECT_EQ(c.seqlen_q, 2048);
  EXPECT_EQ(c.seqlen_k, 2048);
  EXPECT_TRUE(c.causal);
}

TEST(PlanCases, SingleConfigurationTakesDefaultsForWhatIsNotGiven) {
  BenchOptions options;
  options.single = true;
  options.heads = 6;
  options.seqlen = 100;
  options.dtype = "bf16";
  options.algorithm = "flash1";
  options.threads = 1;
  const std::vector<BenchCase> cases = PlanCases(options);
  ASSERT_EQ(cases.size(), 1u);
  const BenchCase& c = cases[0];
  EXPECT_EQ(c.heads, 6);
  EXPECT_EQ(c.heads_kv, 6);  // defaults to heads
  EXPECT_EQ(c.seqlen_q, 100);
  EXPECT_EQ(c.seqlen_k, 100);  // defaults to seqlen
  EXPECT_EQ(c.headdim, 128);
  EXPECT_EQ(c.dtype, DType::kBF16);
  EXPECT_EQ(c.algorithm, Algorithm::kFlash1);
  EXPECT_EQ(c.threads, 1);
}

TEST(PlanCases, ZeroThreadsMeansAllCores) {
  BenchOptions options;
  options.single = true;
  options.threads = 0;
  EXPECT_GE(PlanCases(options)[0].threads, 1);
}

// Each bad value is rejected with a message naming the option and the value.
TEST(PlanCases, RejectsBadValuesNamingTheOption) {
  struct Bad {
    const char* option;
    const char* value;
    void (*apply)(BenchOptions&);
  };
  const Bad bad[] = {
      {"--heads-kv", "3", [](BenchOptions& o) { o.heads = 8; o.heads_kv = 3; }},
      {"--batch", "0", [](BenchOptions& o) { o.batch = 0; }},
      {"--seqlen-k", "-4", [](BenchOptions& o) { o.seqlen_k = -4; }},
      {"--headdim", "577", [](BenchOptions& o) { o.headdim = 577; }},
      {"--threads", "-1", [](BenchOptions& o) { o.threads = -1; }},
      {"--algorithm", "fastest", [](BenchOptions& o) { o.algorithm = "fastest"; }},
      {"--mode", "sideways", [](BenchOptions& o) { o.mode = "sideways"; }},
      {"--seqlen", "1099511627776", [](BenchOptions& o) { o.seqlen = std::int64_t{1} << 40; }},
      {"--cache-len", "0", [](BenchOptions& o) { o.mode = "decode"; o.cache_len = "0"; }},
      {"--cache-len", "4294967296", [](BenchOptions& o) { o.mode = "decode"; o.cache_len = "4294967296"; }},
      {"--cache-len", "9:3", [](BenchOptions& o) { o.mode = "decode"; o.cache_len = "9:3"; }},
      {"--num-splits", "-1", [](BenchOptions& o) { o.mode = "decode"; o.num_splits = -1; }},
      {"--paged", "0", [](BenchOptions& o) { o.mode = "decode"; o.paged = 0; }},
      {"--cache-len", "forward", [](BenchOptions& o) { o.cache_len = "100"; }},
      {"--seed", "5", [](BenchOptions& o) { o.mode = "decode"; o.seed = 5; }},  // no drawn lengths
      {"--paged", "backward", [](BenchOptions& o) { o.mode = "backward"; o.paged = 16; }},
      {"--seqlen-k", "decode", [](BenchOptions& o) { o.mode = "decode"; o.seqlen_k = 100; }},
      {"--algorithm", "decode", [](BenchOptions& o) { o.mode = "decode"; o.algorithm = "fused"; }},
      {"--top-k", "0", [](BenchOptions& o) { o.mode = "decode"; o.top_k = 0; }},
      {"--top-k", "forward", [](BenchOptions& o) { o.top_k = 16; }},
  };
  for (const Bad& b : bad) {
    BenchOptions options;
    options.single = true;
    b.apply(options);
    try {
      PlanCases(options);
      ADD_FAILURE() << b.option << " " << b.value << " accepted";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(b.option), std::string::npos) << message;
    }
  }
}

// Selected keys: a row reads min(top_k, N) keys of each K/V head (per query row); the preset pairs each MLA case
// over 2048 selected keys with dense decode over the same cache.
TEST(PlanCases, TopKReadsTheSelectedKeysAndThePresetPairsThemWithDenseDecode) {
  BenchOptions options;
  options.single = true;
  options.mode = "decode";
  options.heads = 16, options.heads_kv = 1, options.headdim = 576, options.headdim_v = 512;
  options.cache_len = "4096", options.top_k = 256;
  const std::vector<BenchCase> cases = PlanCases(options);
  ASSERT_EQ(cases.size(), 1u);
  const BenchCase& c = cases[0];
  EXPECT_EQ(c.top_k, 256);
  EXPECT_NE(c.Name().find("_topk256"), std::string::npos) << c.Name();
  EXPECT_EQ(TotalCacheLength(c), 256);
  BenchCase dense = c;
  dense.top_k = 0;
  EXPECT_EQ(TotalCacheLength(dense), 4096);
  EXPECT_EQ(CountBytesRead(dense) - CountBytesRead(c), (4096.0 - 256) * 576 * size_of(c.dtype));

  BenchOptions preset;
  preset.preset = "selected-mla";
  std::vector<std::int64_t> top_k, keys;
  for (const BenchCase& m : PlanCases(preset)) {
    EXPECT_EQ(std::tuple(m.mode, m.heads, m.heads_kv, m.headdim, m.headdim_v.value_or(0), m.dtype),
              std::tuple(Mode::kDecode, 128, 1, 576, 512, DType::kBF16));
    top_k.push_back(m.top_k), keys.push_back(m.seqlen_k);
  }
  EXPECT_EQ(top_k, (std::vector<std::int64_t>{2048, 2048, 0, 0}));
  EXPECT_EQ(keys, (std::vector<std::int64_t>{32768, 131072, 32768, 131072}));
}

TEST(PlanCases, CacheLenRangeDrawsEachSequencesLength) {
  BenchOptions options;
  options.single = true;
  options.mode = "decode";
  options.batch = 64;
  options.cache_len = "256:8192";
  options.paged = 16;
  options.threads = 2;
  BenchCase c = PlanCases(options)[0];
  EXPECT_EQ(c.cache_len_min, 256);
  EXPECT_EQ(c.seqlen_k, 8192);
  EXPECT_EQ(c.seed, 1u);
  EXPECT_NE(c.Name().find("_nk256-8192_"), std::string::npos) << c.Name();
  options.seed = 3;
  c = PlanCases(options)[0];
  EXPECT_EQ(c.seed, 3u);
  EXPECT_NE(c.Name().find("_seed3"), std::string::npos) << c.Name();
}

// The eleven cases of --preset decode-roofline, all decode on one query row, 2 threads, no baseline.
TEST(PlanCases, PresetDecodeRooflineExpandsToItsElevenCases) {
  BenchOptions options;
  options.preset = "decode-roofline";
  const std::vector<BenchCase> cases = PlanCases(options);
  ASSERT_EQ(cases.size(), 11u);
  EXPECT_FALSE(RunsBaseline(options));
  std::set<std::string> names;
  for (const BenchCase& c : cases) {
    names.insert(c.Name());
    EXPECT_EQ(c.mode, Mode::kDecode);
    EXPECT_EQ(c.seqlen_q, 1);
    EXPECT_EQ(c.threads, 2);
    EXPECT_EQ(c.num_splits, 0);
    EXPECT_FALSE(c.sinks || c.causal);
  }
  EXPECT_EQ(names.size(), 11u);
  // (batch, Hq, Hkv, d, dv or 0, shortest or 0, keys, page size, dtype, cache element, g, integer q, integer P̃V)
  using Shape = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                           std::int64_t, std::int64_t, DType, CacheElement, std::int64_t, bool, bool>;
  const CacheElement f = CacheElement::kFloat, i8 = CacheElement::kInt8, fp8 = CacheElement::kFp8E4M3;
  const Shape expected[] = {
      {1, 32, 8, 128, 0, 0, 32768, 0, DType::kF16, f, 0, false, false},
      {1, 32, 8, 128, 0, 0, 32768, 0, DType::kBF16, f, 0, false, false},
      {1, 32, 8, 128, 0, 0, 32768, 0, DType::kF16, i8, 0, false, false},
      {1, 32, 8, 128, 0, 0, 32768, 0, DType::kF16, i8, 32, false, false},
      {1, 32, 8, 128, 0, 0, 32768, 0, DType::kF16, i8, 0, true, true},
      {1, 32, 8, 128, 0, 0, 32768, 0, DType::kF16, i8, 32, true, false},
      {1, 32, 8, 128, 0, 0, 32768, 0, DType::kF16, fp8, 0, false, false},
      {1, 8, 1, 128, 0, 0, 131072, 0, DType::kF16, f, 0, false, false},
      {1, 128, 1, 576, 512, 0, 8192, 0, DType::kBF16, f, 0, false, false},
      {64, 32, 8, 128, 0, 256, 8192, 16, DType::kBF16, f, 0, false, false},
      {64, 32, 8, 128, 0, 256, 8192, 16, DType::kBF16, i8, 0, false, false},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const BenchCase& c = cases[i];
    EXPECT_EQ(Shape(c.batch, c.heads, c.heads_kv, c.headdim, c.headdim_v.value_or(0), c.cache_len_min, c.seqlen_k,
                    c.page_size, c.dtype, c.cache_element, c.scale_group_size, c.quantize_query, c.quantize_probs),
              expected[i])
        << "case " << i + 1 << ": " << c.Name();
  }
  EXPECT_EQ(default_scale_granularity(cases[6].cache_element, cases[6].scale_group_size), ScaleGranularity::kPerHead);

  options.threads = 1;  // --threads overrides the preset's; --seed reaches its drawn lengths
  options.seed = 4;
  for (const BenchCase& c : PlanCases(options)) {
    EXPECT_EQ(c.threads, 1);
    EXPECT_EQ(c.seed, 4u);
  }
  options.run.baseline = true;
  EXPECT_FALSE(RunsBaseline(options));
  options.preset.clear();
  EXPECT_TRUE(RunsBaseline(options));
}

TEST(PlanCases, PresetRejectsShapeOptionsAndUnknownNames) {
  BenchOptions options;
  options.preset = "decode-roofline";
  options.single = true;  // a shape option was given
  try {
    PlanCases(options);
    ADD_FAILURE() << "a shape option accepted with --preset";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--preset"), std::string::npos) << e.what();
  }
  options.single = false;
  options.preset = "decode-fastest";
  try {
    PlanCases(options);
    ADD_FAILURE() << "an unknown preset accepted";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("--preset"), std::string::npos) << message;
    EXPECT_NE(message.find("decode-fastest"), std::string::npos) << message;
    EXPECT_NE(message.find("decode-roofline"), std::string::npos) << message;  // the names there are
  }
}

// A serving step: decoding rows read their cache, a prefill chunk of C rows over P cached keys reads its P + C
// keys once, its row i sees P + i + 1 of them (causal).
TEST(BenchCase, ServeCountsEachSequencesKeysOnceAndTheCausalRowsKeys) {
  const BenchCase c{.mode = Mode::kServe, .batch = 3, .heads = 8, .heads_kv = 2, .seqlen_q = 5, .seqlen_k = 40,
                    .headdim = 16, .causal = true, .dtype = DType::kBF16, .page_size = 4, .cache_len_min = 10,
                    .prefill_seqs = 2, .prefill_chunk = 5, .prefill_prefix = 7};
  const std::vector<std::int64_t> drawn = CacheLengths(c);
  const std::vector<ServeSequence> sequences = ServeSequences(c);
  ASSERT_EQ(sequences.size(), 5u);
  for (std::size_t b = 0; b < 3; ++b) EXPECT_EQ(sequences[b].rows, 1) << b;
  for (std::size_t b = 0; b < 3; ++b) EXPECT_EQ(sequences[b].keys, drawn[b]) << b;
  EXPECT_EQ(sequences[4].rows, 5);
  EXPECT_EQ(sequences[4].keys, 12);
  const std::int64_t decoding_keys = drawn[0] + drawn[1] + drawn[2];
  EXPECT_EQ(TotalCacheLength(c), decoding_keys + 2 * 12);
  EXPECT_EQ(TotalQueryRows(c), 3 + 2 * 5);
  EXPECT_EQ(AttendedKeys(c), decoding_keys + 2.0 * (8 + 9 + 10 + 11 + 12));
  EXPECT_EQ(CountFlops(c), 2.0 * 8 * AttendedKeys(c) * 32);
  EXPECT_EQ(CountBytesRead(c), (decoding_keys + 24.0) * 2 * 32 * 2 + 13.0 * 8 * 32 * 2);
  EXPECT_EQ(c.Name(), "serve_bf16_h8_hkv2_d16_dec3x10-40_pre2x5+7_paged4_seed1");
}

TEST(BenchCase, ParseServeGroupsNameTheOptionAndTheForm) {
  const ServeGroup decoding = ParseDecoding("64:256:8192");
  EXPECT_EQ(std::tuple(decoding.count, decoding.first, decoding.second), std::tuple(64, 256, 8192));
  const ServeGroup prefilling = ParsePrefilling("2:512:0");
  EXPECT_EQ(std::tuple(prefilling.count, prefilling.first, prefilling.second), std::tuple(2, 512, 0));
  for (const char* bad : {"0:5:1", "1:5:1", "0:1:5", "4:0:5", "4:5", "4:5:6:7", "a:1:2", "4::5", "", "4:1:2x"}) {
    try {
      ParseDecoding(bad);
      ADD_FAILURE() << "--decoding " << bad << " accepted";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("--decoding"), std::string::npos) << message;
      EXPECT_NE(message.find("N:A:B"), std::string::npos) << message;
    }
  }
  for (const char* bad : {"0:5:1", "1:0:5", "1:5", "1:-5:3", "2147483647:1:2147483647"}) {
    try {
      ParsePrefilling(bad);
      ADD_FAILURE() << "--prefilling " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--prefilling"), std::string::npos) << e.what();
    }
  }
}

// The options of a serving step: 6 sequences decoding over 20 to 90 keys and a chunk of 33 rows over 100.
BenchOptions ServeStepOptions() {
  BenchOptions options;
  options.single = true;
  options.mode = "serve";
  options.decoding = "6:20:90";
  options.prefilling = "1:33:100";
  return options;
}

TEST(PlanCases, ServeTakesDecodingAndPrefillingAndRejectsOtherShapes) {
  BenchOptions options = ServeStepOptions();
  options.dtype = "bf16";
  const std::vector<BenchCase> cases = PlanCases(options);
  ASSERT_EQ(cases.size(), 1u);
  const BenchCase& c = cases[0];
  EXPECT_EQ(c.mode, Mode::kServe);
  EXPECT_EQ(std::tuple(c.batch, c.cache_len_min, c.seqlen_k), std::tuple(6, 20, 90));
  EXPECT_EQ(std::tuple(c.prefill_seqs, c.prefill_chunk, c.prefill_prefix), std::tuple(1, 33, 100));
  EXPECT_EQ(c.seqlen_q, 33);
  EXPECT_EQ(c.page_size, 16);
  EXPECT_TRUE(c.causal);
  EXPECT_FALSE(RunsBaseline(options));  // serve has none

  struct Bad {
    const char* option;
    void (*apply)(BenchOptions&);
  };
  const Bad bad[] = {
      {"--decoding", [](BenchOptions& o) { o.decoding = "0:5:1"; }},
      {"--decoding", [](BenchOptions& o) { o.decoding = "4:9:3"; }},
      {"--decoding", [](BenchOptions& o) { o.decoding = "4-9-3"; }},
      {"--prefilling", [](BenchOptions& o) { o.prefilling = "1:0:3"; }},
      {"--prefilling", [](BenchOptions& o) { o.prefilling = "x"; }},
      {"--decoding", [](BenchOptions& o) { o.decoding.reset(); o.prefilling.reset(); }},
      {"--cache-len", [](BenchOptions& o) { o.cache_len = "100"; }},
      {"--cache-dtype", [](BenchOptions& o) { o.cache_dtype = "int4"; }},
      {"--batch", [](BenchOptions& o) { o.batch = 4; }},
      {"--seqlen", [](BenchOptions& o) { o.seqlen = 4; }},
      {"--paged", [](BenchOptions& o) { o.paged = 0; }},
      {"--decoding", [](BenchOptions& o) { o.mode = "decode"; }},
  };
  for (const Bad& b : bad) {
    BenchOptions o = options;
    b.apply(o);
    try {
      PlanCases(o);
      ADD_FAILURE() << b.option << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(b.option), std::string::npos) << e.what();
    }
  }
}

// Serve takes decode's quantized caches and their options, each named apart, and refuses the combinations
// decode refuses, naming the same options.
TEST(PlanCases, ServeTakesTheQuantizedCacheOptionsOfDecode) {
  BenchOptions options = ServeStepOptions();
  options.headdim = 64;
  options.cache_dtype = "int8";
  options.quantize_query = options.quantize_probs = true;
  BenchCase c = PlanCases(options)[0];
  EXPECT_EQ(std::tuple(c.cache_element, c.quantize_query, c.quantize_probs, c.scale_group_size),
            std::tuple(CacheElement::kInt8, true, true, 0));
  EXPECT_EQ(c.Name(), "serve_f32_h8_hkv8_d64_dec6x20-90_pre1x33+100_paged16_cache_int8_quantize_query_"
                      "quantize_probs_seed1");
  options.quantize_probs = false;
  options.scale_group_size = 16;
  c = PlanCases(options)[0];
  EXPECT_EQ(c.scale_group_size, 16);
  EXPECT_NE(c.Name().find("_cache_int8_quantize_query_g16"), std::string::npos) << c.Name();
  for (const char* element : {"fp8_e4m3", "fp8_e5m2"}) {
    BenchOptions fp8 = options;
    fp8.quantize_query = false;
    fp8.cache_dtype = element;
    fp8.scale_group_size.reset();
    EXPECT_NE(PlanCases(fp8)[0].Name().find(std::string("_cache_") + element), std::string::npos) << element;
  }

  struct Bad {
    const char* option;
    const char* value;  // the offending value the message names
    void (*apply)(BenchOptions&);
  };
  const Bad bad[] = {
      {"--cache-dtype", "fp8_e6m1", [](BenchOptions& o) { o.cache_dtype = "fp8_e6m1"; }},
      {"--quantize-query", "fp8_e4m3", [](BenchOptions& o) { o.cache_dtype = "fp8_e4m3"; }},
      {"--quantize-query", "(none)", [](BenchOptions& o) { o.cache_dtype.clear(); o.scale_group_size.reset(); }},
      {"--quantize-probs", "fp8_e5m2",
       [](BenchOptions& o) { o.quantize_query = false; o.quantize_probs = true; o.cache_dtype = "fp8_e5m2"; }},
      {"--quantize-probs", "16", [](BenchOptions& o) { o.quantize_probs = true; }},
      {"--scale-group-size", "(none)", [](BenchOptions& o) { o.quantize_query = false; o.cache_dtype.clear(); }},
      {"--scale-group-size", "48", [](BenchOptions& o) { o.scale_group_size = 48; }},
      {"--scale-group-size", "0", [](BenchOptions& o) { o.scale_group_size = 0; }},
  };
  for (const char* mode : {"serve", "decode"}) {
    for (const Bad& b : bad) {
      BenchOptions o = options;
      o.mode = mode;
      if (o.mode == "decode") {
        o.decoding.reset();
        o.prefilling.reset();
      }
      b.apply(o);
      try {
        PlanCases(o);
        ADD_FAILURE() << mode << ": " << b.option << " " << b.value << " accepted";
      } catch (const Error& e) {
        const std::string message = e.what();
        EXPECT_NE(message.find(b.option), std::string::npos) << mode << ": " << message;
        EXPECT_NE(message.find(b.value), std::string::npos) << mode << ": " << message;
      }
    }
  }
}

TEST(PlanCases, ServePresetsAreTheirServingSteps) {
  // (decoding sequences, shortest, longest, prefill chunks, rows, prefix)
  using Step = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t>;
  for (const auto& [name, step] : {std::pair{"serve-decode", Step(64, 256, 8192, 0, 0, 0)},
                                   std::pair{"serve-mixed", Step(48, 256, 8192, 2, 512, 4096)},
                                   std::pair{"serve-long-prefill", Step(0, 0, 0, 1, 2048, 32768)}}) {
    BenchOptions options;
    options.preset = name;
    const std::vector<BenchCase> cases = PlanCases(options);
    ASSERT_EQ(cases.size(), 1u) << name;
    const BenchCase& c = cases[0];
    EXPECT_EQ(Step(c.batch, c.cache_len_min, c.seqlen_k, c.prefill_seqs, c.prefill_chunk, c.prefill_prefix), step)
        << name;
    EXPECT_EQ(c.mode, Mode::kServe);
    EXPECT_EQ(std::tuple(c.heads, c.heads_kv, c.headdim, c.page_size, c.dtype, c.causal),
              std::tuple(32, 8, 128, 16, DType::kBF16, true))
        << name;
    EXPECT_EQ(c.seqlen_q, std::max<std::int64_t>(1, c.prefill_chunk)) << name;
    EXPECT_FALSE(RunsBaseline(options));
  }
}

TEST(PlanCases, IndexerPresetAndOptions) {
  BenchOptions options;
  options.preset = "indexer";
  const std::vector<BenchCase> cases = PlanCases(options);
  ASSERT_EQ(cases.size(), 4u);
  for (const BenchCase& c : cases) {
    EXPECT_EQ(c.mode, Mode::kIndexer);
    EXPECT_EQ(std::tuple(c.heads, c.headdim, c.seqlen_q, c.top_k, c.dtype, c.causal),
              std::tuple(64, 128, 1, 2048, DType::kBF16, true));
  }
  EXPECT_EQ(cases[3].seqlen_k, 131072);
  EXPECT_EQ(cases[3].cache_element, CacheElement::kFp8E4M3);
  EXPECT_FALSE(RunsBaseline(options));
  EXPECT_EQ(cases[3].Name(), "indexer_default_bf16_b1_h64_hkv1_nq1_nk131072_d128_causal_topk2048_cache_fp8_e4m3");

  BenchOptions single;
  single.single = true;
  single.mode = "indexer";
  single.heads = 4;
  single.headdim = 40;
  single.cache_len = "1000";
  single.top_k = 10;
  single.paged = 16;
  single.cache_dtype = "int8";
  const BenchCase c = PlanCases(single).at(0);
  EXPECT_EQ(std::tuple(c.seqlen_q, c.seqlen_k, c.top_k, c.page_size, c.cache_element, c.heads_kv),
            std::tuple(1, 1000, 10, 16, CacheElement::kInt8, 1));
  EXPECT_EQ(CountFlops(c), 2.0 * 4 * 40 * 1000);
  EXPECT_FALSE(RunsBaseline(single));
  for (const auto& [option, spoil] : std::vector<std::pair<std::string, std::function<void(BenchOptions&)>>>{
           {"--top-k", [](BenchOptions& o) { o.mode = "forward"; }},
           {"--top-k", [](BenchOptions& o) { o.top_k = 0; }},
           {"--cache-len", [](BenchOptions& o) { o.cache_len = "10:20"; }},
           {"--num-splits", [](BenchOptions& o) { o.num_splits = 2; }}}) {
    BenchOptions bad = single;
    spoil(bad);
    try {
      PlanCases(bad);
      ADD_FAILURE() << option << " accepted";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(option), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace flashattn::bench
