// The benchmark's bookkeeping that needs no timing: FLOP counts, names, and which cases the options select.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <tuple>

#include "bench/bench_case.h"
#include "bench/bench_command.h"

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

TEST(BenchCase, DecodeReadsEveryCachedKeyAndValueOnce) {
  BenchCase c{.mode = Mode::kDecode, .batch = 1, .heads = 32, .heads_kv = 8, .seqlen_q = 1, .seqlen_k = 32768,
              .headdim = 128, .dtype = DType::kF16};
  EXPECT_EQ(CountBytesRead(c), 128.0 * (1 << 20));  // 128 MiB of K and V
  c.dtype = DType::kF32;
  EXPECT_EQ(CountBytesRead(c), 256.0 * (1 << 20));
  c.batch = 3;
  c.heads_kv = 1;
  c.headdim = 64;
  c.dtype = DType::kBF16;
  EXPECT_EQ(CountBytesRead(c), 2.0 * 3 * 32768 * 1 * 64 * 2);
  EXPECT_EQ(CountFlops(c), 4.0 * 3 * 32 * 1 * 32768 * 64);
  c.mode = Mode::kForward;
  EXPECT_EQ(CountBytesRead(c), 0);
}

TEST(BenchCase, NameSpellsOutEveryShapeField) {
  BenchCase c{.batch = 2, .heads = 8, .heads_kv = 2, .seqlen_q = 100, .seqlen_k = 300, .headdim = 64,
              .causal = true, .dtype = DType::kBF16};
  EXPECT_EQ(c.Name(), "forward_default_bf16_b2_h8_hkv2_nq100_nk300_d64_causal");
  c.algorithm = Algorithm::kFlash1;
  c.causal = false;
  EXPECT_EQ(c.Name(), "forward_flash1_bf16_b2_h8_hkv2_nq100_nk300_d64");
  c.mode = Mode::kDecode;
  c.algorithm.reset();
  c.num_splits = 4;
  c.page_size = 256;
  EXPECT_EQ(c.Name(), "decode_default_bf16_b2_h8_hkv2_nq100_nk300_d64_splits4_paged256");
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
  options.cache_len = 131072;
  options.num_splits = 8;
  options.paged = 16;
  options.seqlen = 4;  // speculative decoding
  c = PlanCases(options)[0];
  EXPECT_EQ(c.seqlen_k, 131072);
  EXPECT_EQ(c.num_splits, 8);
  EXPECT_EQ(c.page_size, 16);
  EXPECT_EQ(c.seqlen_q, 4);
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
      {"--cache-len", "0", [](BenchOptions& o) { o.mode = "decode"; o.cache_len = 0; }},
      {"--cache-len", "4294967296",
       [](BenchOptions& o) { o.mode = "decode"; o.cache_len = std::int64_t{1} << 32; }},
      {"--num-splits", "-1", [](BenchOptions& o) { o.mode = "decode"; o.num_splits = -1; }},
      {"--paged", "0", [](BenchOptions& o) { o.mode = "decode"; o.paged = 0; }},
      {"--cache-len", "forward", [](BenchOptions& o) { o.cache_len = 100; }},
      {"--paged", "backward", [](BenchOptions& o) { o.mode = "backward"; o.paged = 16; }},
      {"--seqlen-k", "decode", [](BenchOptions& o) { o.mode = "decode"; o.seqlen_k = 100; }},
      {"--algorithm", "decode", [](BenchOptions& o) { o.mode = "decode"; o.algorithm = "fused"; }},
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

}  // namespace
}  // namespace flashattn::bench
