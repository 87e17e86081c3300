// The rejected inputs of flashattn::forward, table-driven: every case must throw flashattn::Error (an
// std::invalid_argument) whose message names the argument and the offending values, for every algorithm,
// and leave every byte the caller owns unchanged. Zero-length problems are valid.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <ostream>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "flashattn/flashattn.h"

namespace flashattn::testing {
namespace {

static_assert(std::is_base_of_v<std::invalid_argument, Error>);

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr std::int64_t kBig = std::int64_t{1} << 32;

// A valid call with every optional input in use (LSE, per-(batch, head) ALiBi slopes, an additive mask).
// All tensors live in one arena, so a case can point one tensor into another and the test can check that
// no byte of the arena changed.
struct Arena {
  static constexpr std::int64_t B = 2, Nq = 3, Nk = 5, Hq = 4, Hkv = 2, d = 8, dv = 6;
  static constexpr std::int64_t kQ = B * Nq * Hq * d, kK = B * Nk * Hkv * d, kV = B * Nk * Hkv * dv,
                                kO = B * Nq * Hq * dv, kLse = B * Hq * Nq, kAlibi = B * Hq,
                                kMask = B * Hq * Nq * Nk;

  std::vector<float> memory = std::vector<float>(kQ + kK + kV + kO + kLse + kAlibi + kMask);
  float* q = memory.data();
  float* k = q + kQ;
  float* v = k + kK;
  float* o = v + kV;
  float* lse = o + kO;
  float* alibi = lse + kLse;
  float* mask = alibi + kAlibi;
  AttentionParams params;

  Arena() {
    std::mt19937 rng(11);
    std::normal_distribution<float> normal;
    for (float& x : memory) x = normal(rng);
    std::memset(o, 0xA5, sizeof(float) * (kO + kLse));  // outputs: a byte pattern that must survive
    for (std::int64_t n = 0; n < kMask; ++n) mask[n] = n % 7 == 3 ? -kInf : 0.0f;
    AttentionParams& p = params;
    p.q = q, p.k = k, p.v = v, p.o = o, p.lse = lse;
    p.batch = B, p.seqlen_q = Nq, p.seqlen_k = Nk, p.heads_q = Hq, p.heads_kv = Hkv;
    p.head_dim = d, p.head_dim_v = dv;
    p.set_contiguous_strides();
    p.alibi_slopes = alibi, p.alibi_batch_stride = Hq;
    p.mask = {MaskKind::kAdditive, mask, Hq * Nq * Nk, Nq * Nk, Nk, 1};
  }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
};

struct RejectCase {
  const char* name;
  std::function<void(AttentionParams&, const Arena&)> mutate;
  std::vector<std::string> message_parts;  // each must appear in the error message
};

const void* AddressNearTheEnd() { return reinterpret_cast<const void*>(UINTPTR_MAX - 63); }

std::vector<RejectCase> RejectCases() {
  using P = AttentionParams;
  using A = Arena;
  const std::string q_count = std::to_string(A::kQ), k_count = std::to_string(A::kK),
                    v_count = std::to_string(A::kV), o_count = std::to_string(A::kO);
  return {
      // Null pointers for tensors that hold elements.
      {"NullQ", [](P& p, const A&) { p.q = nullptr; }, {"q is a null pointer", q_count + " elements"}},
      {"NullK", [](P& p, const A&) { p.k = nullptr; }, {"k is a null pointer", k_count + " elements"}},
      {"NullV", [](P& p, const A&) { p.v = nullptr; }, {"v is a null pointer", v_count + " elements"}},
      {"NullO", [](P& p, const A&) { p.o = nullptr; }, {"o is a null pointer", o_count + " elements"}},
      {"MaskKindWithNullData", [](P& p, const A&) { p.mask.data = nullptr; }, {"mask.data is a null pointer"}},
      {"BoolMaskWithNullData", [](P& p, const A&) { p.mask = {MaskKind::kBool, nullptr, 0, 0, 5, 1}; },
       {"mask.data is a null pointer"}},
      // Sizes.
      {"NegativeBatch", [](P& p, const A&) { p.batch = -1; }, {"batch must be >= 0, got -1"}},
      {"NegativeSeqlenQ", [](P& p, const A&) { p.seqlen_q = -3; }, {"seqlen_q must be >= 0, got -3"}},
      {"NegativeSeqlenK", [](P& p, const A&) { p.seqlen_k = -1; }, {"seqlen_k must be >= 0, got -1"}},
      {"ZeroHeadsQ", [](P& p, const A&) { p.heads_q = 0; }, {"heads_q must be >= 1, got 0"}},
      {"NegativeHeadsKv", [](P& p, const A&) { p.heads_kv = -2; }, {"heads_kv must be >= 1, got -2"}},
      {"HeadsQNotMultipleOfHeadsKv", [](P& p, const A&) { p.heads_kv = 3; }, {"heads_q=4", "heads_kv=3"}},
      {"HeadDimZero", [](P& p, const A&) { p.head_dim = 0; }, {"head_dim must be in [1, 576], got 0"}},
      {"HeadDimNegative", [](P& p, const A&) { p.head_dim = -8; }, {"head_dim must be in [1, 576], got -8"}},
      {"HeadDimAboveMax", [](P& p, const A&) { p.head_dim = 577; }, {"head_dim must be in [1, 576], got 577"}},
      {"HeadDimVZero", [](P& p, const A&) { p.head_dim_v = 0; }, {"head_dim_v must be in [1, 576], got 0"}},
      {"HeadDimVAboveMax", [](P& p, const A&) { p.head_dim_v = 1024; },
       {"head_dim_v must be in [1, 576], got 1024"}},
      // Masks and modifiers.
      {"WindowLeftBelowMinusOne", [](P& p, const A&) { p.window_left = -2; },
       {"window_left must be >= -1, got -2"}},
      {"WindowRightMostNegative", [](P& p, const A&) { p.window_right = INT64_MIN; },
       {"window_right must be >= -1, got -9223372036854775808"}},
      {"SoftcapNegative", [](P& p, const A&) { p.softcap = -1.5f; }, {"softcap", "got -1.5"}},
      {"SoftcapNaN", [](P& p, const A&) { p.softcap = kNaN; }, {"softcap", "nan"}},
      {"SoftcapInfinite", [](P& p, const A&) { p.softcap = kInf; }, {"softcap", "got inf"}},
      {"ScaleNaN", [](P& p, const A&) { p.scale = kNaN; }, {"scale must be finite", "nan"}},
      {"ScaleInfinite", [](P& p, const A&) { p.scale = kInf; }, {"scale must be finite, got inf"}},
      {"ScaleMinusInfinite", [](P& p, const A&) { p.scale = -kInf; }, {"scale must be finite, got -inf"}},
      {"AlibiBatchStrideNegative", [](P& p, const A&) { p.alibi_batch_stride = -4; },
       {"alibi_batch_stride must be >= 0, got -4"}},
      {"AlibiBatchStrideBelowHeads", [](P& p, const A&) { p.alibi_batch_stride = 3; },
       {"alibi_batch_stride", "heads_q=4", "got 3"}},
      {"UnknownMaskKind", [](P& p, const A&) { p.mask.kind = static_cast<MaskKind>(9); },
       {"mask.kind has an unknown value 9"}},
      {"UnknownDType", [](P& p, const A&) { p.dtype = static_cast<DType>(7); },
       {"dtype has an unknown value 7"}},
      // Dropout: p in [0, 1), and a generator counter for every element of P.
      {"DropoutOne", [](P& p, const A&) { p.dropout_p = 1.0f; }, {"dropout_p must be in [0, 1), got 1"}},
      {"DropoutNegative", [](P& p, const A&) { p.dropout_p = -0.5f; }, {"dropout_p must be in [0, 1), got -0.5"}},
      {"DropoutNaN", [](P& p, const A&) { p.dropout_p = kNaN; }, {"dropout_p must be in [0, 1), got nan"}},
      {"DropoutCountersOverflow",
       [](P& p, const A&) {
         p.dropout_p = 0.5f;
         p.seqlen_q = p.seqlen_k = kBig * 256;
       },
       {"generator counters, more than 2^63", "batch=2 heads_q=4 seqlen_q=1099511627776"}},
      // Execution settings.
      {"NegativeThreads", [](P& p, const A&) { p.num_threads = -1; },
       {"num_threads must be in [0, 1024], got -1"}},
      {"ThreadsBeyondAnyMachine", [](P& p, const A&) { p.num_threads = 100000; },
       {"num_threads must be in [0, 1024], got 100000"}},
      {"NegativeFastMemory", [](P& p, const A&) { p.tiling.fast_memory_bytes = -1; },
       {"tiling.fast_memory_bytes must be >= 0, got -1"}},
      {"FastMemoryBelowOneRow", [](P& p, const A&) { p.tiling.fast_memory_bytes = 64; },
       {"tiling.fast_memory_bytes", "head_dim=8", "got 64"}},
      {"NegativeBlockRows", [](P& p, const A&) { p.tiling.block_rows = -1; },
       {"tiling.block_rows must be >= 0, got -1"}},
      {"NegativeBlockCols", [](P& p, const A&) { p.tiling.block_cols = -2; },
       {"tiling.block_cols must be >= 0, got -2"}},
      // Strides: the feature stride is 1 by construction, the others must not be negative.
      {"NegativeQSeqStride", [](P& p, const A&) { p.q_strides.seq = -32; },
       {"q stride of dimension 'seq' must be >= 0, got -32"}},
      {"NegativeKBatchStride", [](P& p, const A&) { p.k_strides.batch = -1; },
       {"k stride of dimension 'batch' must be >= 0, got -1"}},
      {"NegativeVHeadStride", [](P& p, const A&) { p.v_strides.head = -6; },
       {"v stride of dimension 'head' must be >= 0, got -6"}},
      {"NegativeOSeqStride", [](P& p, const A&) { p.o_strides.seq = -24; },
       {"o stride of dimension 'seq' must be >= 0, got -24"}},
      {"NegativeMaskColStride", [](P& p, const A&) { p.mask.stride_col = -1; },
       {"mask stride of dimension 'col' must be >= 0, got -1"}},
      // Outputs that overlap themselves, an input or each other.
      {"OHeadsOverlap", [](P& p, const A&) { p.o_strides.head = 2; },
       {"o overlaps itself", "'head' has stride 2", "span 6 elements"}},
      {"ORowsShareMemory", [](P& p, const A&) { p.o_strides.seq = 0; },
       {"o overlaps itself", "'seq' has stride 0"}},
      {"OIsQ", [](P& p, const A& a) { p.o = a.q; }, {"o overlaps q", "o bytes [", "q bytes ["}},
      {"OStartsInsideK", [](P& p, const A& a) { p.o = a.k + A::kK - 1; }, {"o overlaps k"}},
      {"OStartsInsideV", [](P& p, const A& a) { p.o = a.v + 3; }, {"o overlaps v"}},
      {"AlibiSlopesInsideO", [](P& p, const A& a) { p.alibi_slopes = a.o + 2; }, {"o overlaps alibi_slopes"}},
      {"MaskInsideO", [](P& p, const A& a) { p.mask.data = a.o + A::kO - 1; }, {"o overlaps mask"}},
      {"LseOverlapsO", [](P& p, const A& a) { p.lse = a.o + A::kO - 1; }, {"o overlaps lse"}},
      {"LseIsK", [](P& p, const A& a) { p.lse = a.k; }, {"lse overlaps k"}},
      // Sizes and strides whose products do not fit 64-bit indexing.
      {"QOffsetOverflows",
       [](P& p, const A&) {
         p.seqlen_q = kBig * 256;
         p.q_strides.seq = kBig * 256;
       },
       {"q is too large to index in 64 bits", "'seq' of size 1099511627776 with stride 1099511627776"}},
      {"KByteCountOverflows",
       [](P& p, const A&) {
         p.seqlen_k = std::int64_t{1} << 61;
         p.k_strides = {0, 1, 0};
       },
       {"k is too large to index in 64 bits", "2305843009213693959 elements of 4 bytes"}},
      {"LseIndexOverflows",
       [](P& p, const A&) {
         p.heads_q = p.heads_kv = p.seqlen_q = kBig;
         p.alibi_slopes = nullptr, p.alibi_batch_stride = 0;
         p.mask.kind = MaskKind::kNone;
       },
       {"lse is too large to index in 64 bits", "heads_q=4294967296", "seqlen_q=4294967296"}},
      {"QPastEndOfAddressSpace", [](P& p, const A&) { p.q = AddressNearTheEnd(); },
       {"q extends past the end of the address space"}},
  };
}

void PrintTo(const RejectCase& reject, std::ostream* out) { *out << reject.name; }

using Case = std::tuple<Algorithm, RejectCase>;
class RejectedInputTest : public ::testing::TestWithParam<Case> {};

TEST_P(RejectedInputTest, ThrowsErrorNamingArgumentAndLeavesMemoryUnchanged) {
  const auto& [algorithm, reject] = GetParam();
  Arena arena;
  AttentionParams params = arena.params;
  reject.mutate(params, arena);
  const std::vector<float> before = arena.memory;

  std::string message;
  try {
    forward(params, algorithm);
    ADD_FAILURE() << "forward accepted the call";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(dynamic_cast<const Error*>(&e), nullptr) << "not a flashattn::Error: " << e.what();
    message = e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw something other than flashattn::Error: " << e.what();
  }
  for (const std::string& part : reject.message_parts) {
    EXPECT_NE(message.find(part), std::string::npos) << "message lacks '" << part << "': " << message;
  }
  EXPECT_EQ(std::memcmp(before.data(), arena.memory.data(), sizeof(float) * before.size()), 0)
      << "a rejected call changed memory the caller owns";

  // validate() alone gives the same verdict, so callers may check a call without running it.
  try {
    validate(params);
    ADD_FAILURE() << "validate accepted the call";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, RejectedInputTest,
    ::testing::Combine(::testing::ValuesIn(kAllAlgorithms), ::testing::ValuesIn(RejectCases())),
    [](const ::testing::TestParamInfo<Case>& info) {
      return std::string(to_string(std::get<0>(info.param))) + "_" + std::get<1>(info.param).name;
    });

class ValidInputTest : public ::testing::TestWithParam<Algorithm> {};

// The arena's call is valid, so each rejection above is due to its one change alone.
TEST_P(ValidInputTest, ArenaCallIsAcceptedAndWritesEveryOutput) {
  Arena arena;
  const std::vector<float> before = arena.memory;
  ASSERT_NO_THROW(forward(arena.params, GetParam()));
  for (std::int64_t n = 0; n < Arena::kO + Arena::kLse; ++n) {
    ASSERT_NE(std::memcmp(&arena.o[n], &before[arena.o - arena.q + n], sizeof(float)), 0) << "output " << n;
  }
  EXPECT_EQ(std::memcmp(before.data(), arena.memory.data(), sizeof(float) * (arena.o - arena.q)), 0)
      << "inputs changed";
}

// Zero-length problems are valid: empty tensors need no memory (their pointers may be null), strides derived
// from a zero length may be 0, and nothing is written but the outputs' real elements.
TEST_P(ValidInputTest, ZeroLengthProblemsAreValid) {
  for (bool head_major : {false, true}) {
    SCOPED_TRACE(head_major ? "(batch, head, seq, dim) layout" : "(batch, seq, head, dim) layout");
    Arena arena;
    const std::vector<float> before = arena.memory;
    auto with_strides = [&](AttentionParams p) {
      if (head_major) p.set_head_major_strides(); else p.set_contiguous_strides();
      return p;
    };

    AttentionParams no_queries = arena.params;
    no_queries.seqlen_q = 0;
    no_queries = with_strides(no_queries);
    ASSERT_NO_THROW(forward(no_queries, GetParam()));
    EXPECT_EQ(std::memcmp(before.data(), arena.memory.data(), sizeof(float) * before.size()), 0);
    no_queries.q = nullptr, no_queries.o = nullptr, no_queries.lse = nullptr, no_queries.mask.data = nullptr;
    EXPECT_NO_THROW(forward(no_queries, GetParam()));

    AttentionParams no_batches = arena.params;
    no_batches.batch = 0;
    no_batches.q = no_batches.k = no_batches.v = nullptr, no_batches.o = nullptr, no_batches.lse = nullptr;
    no_batches.mask.data = nullptr, no_batches.alibi_slopes = nullptr;
    EXPECT_NO_THROW(forward(with_strides(no_batches), GetParam()));
    EXPECT_EQ(std::memcmp(before.data(), arena.memory.data(), sizeof(float) * before.size()), 0);

    // No keys: every row sees nothing, so O = 0 and LSE = −∞ (docs/algorithms.md §6).
    AttentionParams no_keys = arena.params;
    no_keys.seqlen_k = 0;
    no_keys.k = no_keys.v = nullptr, no_keys.mask.data = nullptr;
    ASSERT_NO_THROW(forward(with_strides(no_keys), GetParam()));
    for (std::int64_t n = 0; n < Arena::kO; ++n) EXPECT_EQ(arena.o[n], 0.0f) << "O element " << n;
    for (std::int64_t n = 0; n < Arena::kLse; ++n) EXPECT_EQ(arena.lse[n], -kInf) << "LSE element " << n;
    EXPECT_EQ(std::memcmp(before.data(), arena.memory.data(), sizeof(float) * (arena.o - arena.q)), 0)
        << "inputs changed";
  }
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, ValidInputTest, ::testing::ValuesIn(kAllAlgorithms),
                         [](const ::testing::TestParamInfo<Algorithm>& info) {
                           return std::string(to_string(info.param));
                         });

TEST(RejectedInputTest, UnknownAlgorithmIsRejectedWithItsValue) {
  Arena arena;
  const std::vector<float> before = arena.memory;
  try {
    forward(arena.params, static_cast<Algorithm>(200));
    ADD_FAILURE() << "forward accepted an unknown algorithm";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("algorithm has an unknown value 200"), std::string::npos) << e.what();
  }
  EXPECT_EQ(std::memcmp(before.data(), arena.memory.data(), sizeof(float) * before.size()), 0);
}

TEST(RejectedInputTest, ParseAlgorithmNamesTheArgumentAndTheValue) {
  try {
    parse_algorithm("flash3", "--algorithm");
    ADD_FAILURE() << "parse_algorithm accepted 'flash3'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--algorithm"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'flash3'"), std::string::npos) << e.what();
  }
  for (Algorithm algorithm : kAllAlgorithms) EXPECT_EQ(parse_algorithm(to_string(algorithm)), algorithm);
}

}  // namespace
}  // namespace flashattn::testing
