// Rejected inputs of decode(): each a flashattn::Error naming the argument, with the cache (and O, LSE)
// left byte-for-byte unchanged.
#include <cmath>
#include <functional>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "decode_test_case.h"
#include "flashattn/decode.h"

namespace flashattn::testing {
namespace {

struct BadInput {
  const char* name;
  std::int64_t page_size;  // the case's layout
  std::function<void(DecodeCase&)> spoil;
  const char* message;  // a fragment the error must contain
};

DecodeShape ValidationShape(std::int64_t page_size) {
  return DecodeShape{.Nq = 2, .Nnew = 2, .Hq = 4, .Hkv = 2, .d = 16, .Nmax = 20, .cached = {10, 18, 0},
                     .dtype = DType::kF16, .page_size = page_size};
}

class DecodeRejects : public ::testing::TestWithParam<BadInput> {};

TEST_P(DecodeRejects, WithAClearErrorAndTheCacheUnchanged) {
  const BadInput& bad = GetParam();
  DecodeCase c(ValidationShape(bad.page_size), DecodeMods{.causal = true, .rotary_dim = 8}, 1);
  bad.spoil(c);
  const std::vector<std::uint16_t> before = c.CacheSnapshot();
  try {
    decode(c.params());
    ADD_FAILURE() << "no error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(bad.message), std::string::npos) << error.what();
  }
  EXPECT_EQ(c.CacheSnapshot(), before);
  for (std::int64_t n = 0; n < c.batch() * 2 * 4 * 16; ++n) {
    // O (batch 3, Nq 2, Hq 4, d 16) still holds the case's NaN fill pattern everywhere.
    EXPECT_TRUE(std::isnan(c.O(n / 128, n / 64 % 2, n / 16 % 4, n % 16))) << n;
  }
}

// Table entries are (batch, max_pages) with row stride block_table_stride.
std::int32_t* Table(DecodeCase& c, std::int64_t b, std::int64_t n) {
  return const_cast<std::int32_t*>(c.params().block_table) + b * c.params().block_table_stride + n;
}

// Packed queries (cu_seqlens_q) of the case's three sequences, kept for the life of the test.
void Pack(DecodeCase& c, std::vector<std::int32_t> cu) {
  static std::vector<std::int32_t> kept;
  kept = std::move(cu);
  c.params().cu_seqlens_q = kept.data();
}

const BadInput kBadInputs[] = {
    {"cu_seqlens_q_decreasing", 4, [](DecodeCase& c) { Pack(c, {0, 2, 1, 6}); },
     "cu_seqlens_q must be non-decreasing, got cu_seqlens_q[1]=2 > cu_seqlens_q[2]=1"},
    {"cu_seqlens_q_not_from_zero", 0, [](DecodeCase& c) { Pack(c, {1, 2, 4, 6}); }, "cu_seqlens_q[0] must be 0, got 1"},
    {"cu_seqlens_q_beyond_seqlen_q", 0, [](DecodeCase& c) { Pack(c, {0, 3, 4, 6}); },
     "sequence 0 has 3 query rows in cu_seqlens_q"},
    {"packed_append_of_another_count", 4,
     [](DecodeCase& c) {
       Pack(c, {0, 2, 4, 6});
       c.params().seqlen_new = 1;
     },
     "seqlen_new must be 0 or seqlen_q=2"},
    {"table_entry_negative", 4, [](DecodeCase& c) { *Table(c, 1, 2) = -1; }, "block_table[1][2] = -1 is out of range"},
    {"table_entry_too_large", 4, [](DecodeCase& c) { *Table(c, 0, 0) = static_cast<std::int32_t>(c.params().num_pages); },
     "block_table[0][0]"},
    // Sequence 1 (18 + 2 = 20 keys) uses all five pages of 4: its last entry is checked too.
    {"table_entry_last_used_page", 4, [](DecodeCase& c) { *Table(c, 1, 4) = 1000; }, "block_table[1][4] = 1000"},
    {"paged_capacity", 4, [](DecodeCase& c) { c.params().max_pages = 4; }, "exceeds the cache capacity of 16"},
    {"contiguous_capacity", 0, [](DecodeCase& c) { c.params().cache_seqlen_max = 19; },
     "cache_seqlens[1] + seqlen_new = 18 + 2 = 20 exceeds the cache capacity of 19"},
    {"negative_cache_seqlen", 0, [](DecodeCase& c) { const_cast<std::int32_t*>(c.params().cache_seqlens)[2] = -3; },
     "cache_seqlens[2] must be >= 0, got -3"},
    {"scales_of_a_float_cache", 0, [](DecodeCase& c) { c.params().k_scale = reinterpret_cast<float*>(c.k_cache().data()); },
     "k_scale and v_scale must be null for a float cache"},
    {"shared_append_slot", 4, [](DecodeCase& c) { *Table(c, 1, 4) = *Table(c, 0, 2); },  // both append to slots 2, 3
     "two appended keys would be written to the same cache slot"},
    {"rotary_beyond_table", 0, [](DecodeCase& c) { c.params().rotary_max_pos = 19; }, "rotary position 19 of sequence 1"},
    {"rotary_dim_odd", 0, [](DecodeCase& c) { c.params().rotary_dim = 7; }, "rotary_dim must be even"},
    {"rotary_dim_too_large", 0, [](DecodeCase& c) { c.params().rotary_dim = 18; }, "rotary_dim must be in [0, 16]"},
    {"o_overlaps_cache", 0, [](DecodeCase& c) { c.params().o = c.params().k_cache; }, "overlaps"},
    {"k_cache_is_v_cache_with_v_new", 3, [](DecodeCase& c) { c.params().v_cache = c.params().k_cache; },
     "v_new must be null when V is read inside the K cache"},
    {"v_cache_inside_k_cache", 3,
     [](DecodeCase& c) { c.params().v_cache = static_cast<char*>(c.params().k_cache) + 4; }, "overlaps"},
    {"null_k_new", 0, [](DecodeCase& c) { c.params().k_new = nullptr; }, "k_new is a null pointer"},
    {"heads", 0, [](DecodeCase& c) { c.params().heads_kv = 3; }, "heads_q must be a multiple of heads_kv"},
    {"num_splits", 0, [](DecodeCase& c) { c.params().num_splits = -1; }, "num_splits must be >= 0"},
    {"page_size", 4, [](DecodeCase& c) { c.params().page_size = 0; }, "page_size must be >= 1"},
    {"table_stride", 4, [](DecodeCase& c) { c.params().block_table_stride = 2; }, "block_table_stride must be >= 5"},
    {"softcap", 0, [](DecodeCase& c) { c.params().softcap = -1.0f; }, "softcap"},
    {"probs_u8_over_a_float_cache", 0, [](DecodeCase& c) { c.params().quantize_probs_u8 = true; },
     "quantize_probs_u8 needs an int8 cache (cache_element=int8), got cache_element=float"},
};

INSTANTIATE_TEST_SUITE_P(Table, DecodeRejects, ::testing::ValuesIn(kBadInputs),
                         [](const ::testing::TestParamInfo<BadInput>& info) { return std::string(info.param.name); });

TEST(DecodeValidation, UnusedTableEntriesAreNotRead) {
  // The case's padding column holds −7 and sequence 2 uses one page of five: the call succeeds.
  DecodeCase c(ValidationShape(4), DecodeMods{}, 2);
  *Table(c, 2, 3) = -99;
  EXPECT_NO_THROW(decode(c.params()));
}

// One sequence of 4 cached keys, d 64, in a quantized cache of the given element type with per-token scales
// in groups of group_size features (0: one scale per row); all values zero, all scales one.
struct QuantizedCache {
  static constexpr std::int64_t kHq = 2, kHkv = 1, kD = 64, kKeys = 4;

  QuantizedCache(CacheElement element, std::int64_t group_size)
      : groups(group_size > 0 ? kD / group_size : 1),
        q(kHq * kD),
        o(kHq * kD),
        lse(kHq),
        k_cache(kKeys * kHkv * kD),
        v_cache(kKeys * kHkv * kD),
        k_scale(kKeys * kHkv * groups, 1.0f),
        v_scale(kKeys * kHkv * groups, 1.0f) {
    params.batch = 1, params.seqlen_q = 1, params.heads_q = kHq, params.heads_kv = kHkv, params.head_dim = kD;
    params.cache_element = element, params.scale_group_size = group_size;
    params.cache_seqlens = &seqlen, params.cache_seqlen_max = kKeys;
    params.q = q.data(), params.o = o.data(), params.lse = lse.data();
    params.k_cache = k_cache.data(), params.v_cache = v_cache.data();
    params.k_scale = k_scale.data(), params.v_scale = v_scale.data();
    params.set_contiguous_strides();
  }
  QuantizedCache(const QuantizedCache&) = delete;  // params points into the buffers
  QuantizedCache& operator=(const QuantizedCache&) = delete;

  std::int64_t groups;
  std::int32_t seqlen = kKeys;
  std::vector<float> q, o, lse;
  std::vector<std::uint8_t> k_cache, v_cache;
  std::vector<float> k_scale, v_scale;
  DecodeParams params;
};

// quantize_probs_u8 rounds P̃ · v_scale per key: an int8 cache with one V scale per row only. Each refused
// cache is valid without the flag.
TEST(DecodeValidation, ProbsU8NeedsAnInt8CacheWithOneScalePerRow) {
  const std::tuple<CacheElement, std::int64_t, const char*> refused[] = {
      {CacheElement::kFp8E4M3, 0,
       "quantize_probs_u8 needs an int8 cache (cache_element=int8), got cache_element=fp8_e4m3"},
      {CacheElement::kFp8E5M2, 0,
       "quantize_probs_u8 needs an int8 cache (cache_element=int8), got cache_element=fp8_e5m2"},
      {CacheElement::kInt8, 32,
       "quantize_probs_u8 needs one V scale per row (scale_group_size 0), got scale_group_size=32"},
  };
  for (const auto& [element, group_size, message] : refused) {
    QuantizedCache cache(element, group_size);
    EXPECT_NO_THROW(validate(cache.params)) << message;
    cache.params.quantize_probs_u8 = true;
    try {
      validate(cache.params);
      ADD_FAILURE() << "accepted: " << message;
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(message), std::string::npos) << error.what();
    }
  }
  for (const std::int64_t group_size : {std::int64_t{0}, QuantizedCache::kD}) {
    QuantizedCache cache(CacheElement::kInt8, group_size);
    cache.params.quantize_probs_u8 = true;
    EXPECT_NO_THROW(validate(cache.params)) << group_size;
  }
}

}  // namespace
}  // namespace flashattn::testing
