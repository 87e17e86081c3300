// The validation matrix of decode() (docs/robustness.md): contiguous and paged caches with appended keys, rotary, ALiBi
// and LSE in use. Every row must throw flashattn::Error naming the argument and the offending values, and
// leave q, the caches, the new keys, O, LSE, the tables and every other byte of the arena unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "flashattn/decode.h"
#include "validation_matrix.h"

namespace flashattn::testing {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Three sequences holding 10, 18 and 0 keys, two new keys and two queries each, in a cache of 20 keys per
// sequence: contiguous (3, 20, Hkv, d) or paged (16 pages of 4 keys, 5 pages per sequence; sequence 1 uses
// all); float32, or int8 with per-token scales (the cache buffers' bytes then hold the int8 values).
struct DecodeFixture {
  static constexpr std::int64_t B = 3, Nq = 2, Nnew = 2, Hq = 4, Hkv = 2, d = 16, Nmax = 20, kRotary = 8;
  static constexpr std::int64_t kPageSize = 4, kPages = 16, kMaxPages = 5;

  Arena arena{64 * 1024};
  DecodeParams params;
  float *q = nullptr, *k_cache = nullptr, *v_cache = nullptr, *k_new = nullptr, *v_new = nullptr,
        *o = nullptr, *lse = nullptr, *alibi = nullptr, *cos = nullptr, *sin = nullptr;
  float *k_scale = nullptr, *v_scale = nullptr;
  std::int32_t *cache_seqlens = nullptr, *block_table = nullptr;

  void Make(bool paged, CacheElement element = CacheElement::kFloat) {
    const std::int64_t cache_rows = paged ? kPages * kPageSize : B * Nmax;
    q = arena.Take<float>(B * Nq * Hq * d);
    k_cache = arena.Take<float>(cache_rows * Hkv * d);
    v_cache = arena.Take<float>(cache_rows * Hkv * d);
    k_new = arena.Take<float>(B * Nnew * Hkv * d);
    v_new = arena.Take<float>(B * Nnew * Hkv * d);
    alibi = arena.Take<float>(B * Hq);
    cos = arena.Take<float>(Nmax * kRotary / 2);
    sin = arena.Take<float>(Nmax * kRotary / 2);
    o = arena.Take<float>(B * Nq * Hq * d);
    lse = arena.Take<float>(B * Hq * Nq);
    cache_seqlens = arena.Take<std::int32_t>(B);
    block_table = arena.Take<std::int32_t>(B * kMaxPages);
    k_scale = arena.Take<float>(cache_rows * Hkv);
    v_scale = arena.Take<float>(cache_rows * Hkv);
    std::fill(k_scale, k_scale + cache_rows * Hkv, 0.05f);
    std::fill(v_scale, v_scale + cache_rows * Hkv, 0.03f);
    std::uint64_t seed = 1;
    for (auto [data, count] : {std::pair{q, B * Nq * Hq * d},
                               {k_cache, cache_rows * Hkv * d},
                               {v_cache, cache_rows * Hkv * d},
                               {k_new, B * Nnew * Hkv * d},
                               {v_new, B * Nnew * Hkv * d}}) {
      Arena::FillNormal(data, count, seed++);
    }
    for (std::int64_t n = 0; n < B * Hq; ++n) alibi[n] = 0.25f / static_cast<float>(n + 1);
    for (std::int64_t n = 0; n < Nmax * kRotary / 2; ++n) {
      cos[n] = std::cos(0.1f * static_cast<float>(n));
      sin[n] = std::sin(0.1f * static_cast<float>(n));
    }
    Arena::FillPattern(o, sizeof(float) * (B * Nq * Hq * d));
    Arena::FillPattern(lse, sizeof(float) * (B * Hq * Nq));
    cache_seqlens[0] = 10, cache_seqlens[1] = 18, cache_seqlens[2] = 0;
    // Distinct pages per sequence; −7 pads the entries a sequence does not use (they must not be read).
    const std::int32_t table[B][kMaxPages] = {{3, 7, 1, -7, -7}, {0, 2, 4, 5, 6}, {8, -7, -7, -7, -7}};
    std::memcpy(block_table, table, sizeof(table));

    DecodeParams& p = params;
    p.q = q, p.k_cache = k_cache, p.v_cache = v_cache, p.k_new = k_new, p.v_new = v_new, p.o = o, p.lse = lse;
    p.cache_seqlens = cache_seqlens;
    p.batch = B, p.seqlen_q = Nq, p.seqlen_new = Nnew, p.heads_q = Hq, p.heads_kv = Hkv, p.head_dim = d;
    if (paged) {
      p.block_table = block_table, p.block_table_stride = kMaxPages;
      p.max_pages = kMaxPages, p.num_pages = kPages, p.page_size = kPageSize;
    } else {
      p.cache_seqlen_max = Nmax;
    }
    p.rotary_cos = cos, p.rotary_sin = sin, p.rotary_dim = kRotary, p.rotary_max_pos = Nmax;
    p.causal = true;
    p.alibi_slopes = alibi, p.alibi_batch_stride = Hq;
    if (element != CacheElement::kFloat) p.cache_element = element, p.k_scale = k_scale, p.v_scale = v_scale;
    p.set_contiguous_strides();
  }
};

using Row = Rejection<DecodeFixture>;
using F = DecodeFixture;

void RunDecode(F& f) { decode(f.params); }
void ValidateOnly(F& f) { validate(f.params); }

// Rows that apply to both cache layouts.
std::vector<Row> CommonRows() {
  return {
      // Null pointers of tensors that hold elements.
      {"null_q", [](F& f) { f.params.q = nullptr; }, {"q is a null pointer but holds 384 elements"}},
      {"null_o", [](F& f) { f.params.o = nullptr; }, {"o is a null pointer but holds 384 elements"}},
      {"null_k_cache", [](F& f) { f.params.k_cache = nullptr; }, {"k_cache is a null pointer but holds"}},
      {"null_v_cache", [](F& f) { f.params.v_cache = nullptr; }, {"v_cache is a null pointer but holds"}},
      {"null_k_new",
       [](F& f) { f.params.k_new = nullptr; },
       {"k_new is a null pointer but holds 192 elements"}},
      {"null_v_new",
       [](F& f) { f.params.v_new = nullptr; },
       {"v_new is a null pointer but holds 192 elements"}},
      {"null_cache_seqlens",
       [](F& f) { f.params.cache_seqlens = nullptr; },
       {"cache_seqlens is a null pointer but holds 3 elements"}},
      {"null_rotary_cos",
       [](F& f) { f.params.rotary_cos = nullptr; },
       {"rotary_cos is a null pointer", "rotary_dim=8"}},
      {"null_rotary_sin",
       [](F& f) { f.params.rotary_sin = nullptr; },
       {"rotary_sin is a null pointer", "rotary_dim=8"}},
      // Sizes.
      {"negative_batch", [](F& f) { f.params.batch = -1; }, {"batch must be >= 0, got -1"}},
      {"negative_seqlen_q", [](F& f) { f.params.seqlen_q = -2; }, {"seqlen_q must be >= 0, got -2"}},
      {"negative_seqlen_new", [](F& f) { f.params.seqlen_new = -1; }, {"seqlen_new must be >= 0, got -1"}},
      {"zero_heads_q", [](F& f) { f.params.heads_q = 0; }, {"heads_q must be >= 1, got 0"}},
      {"zero_heads_kv", [](F& f) { f.params.heads_kv = 0; }, {"heads_kv must be >= 1, got 0"}},
      {"heads_q_not_multiple",
       [](F& f) { f.params.heads_kv = 3; },
       {"heads_q must be a multiple of heads_kv, got heads_q=4 heads_kv=3"}},
      {"head_dim_zero", [](F& f) { f.params.head_dim = 0; }, {"head_dim must be in [1, 576], got 0"}},
      {"head_dim_above_max",
       [](F& f) { f.params.head_dim = 577; },
       {"head_dim must be in [1, 576], got 577"}},
      {"unknown_dtype",
       [](F& f) { f.params.dtype = static_cast<DType>(9); },
       {"dtype has an unknown value 9"}},
      {"unknown_cache_dtype",
       [](F& f) { f.params.cache_dtype = static_cast<DType>(9); },
       {"cache_dtype has an unknown value 9"}},
      {"unknown_cache_element",
       [](F& f) { f.params.cache_element = static_cast<CacheElement>(9); },
       {"cache_element has an unknown value 9"}},
      {"unknown_scale_granularity",
       [](F& f) { f.params.scale_granularity = static_cast<ScaleGranularity>(7); },
       {"scale_granularity has an unknown value 7"}},
      {"scales_of_a_float_cache",
       [](F& f) { f.params.v_scale = f.alibi; },
       {"k_scale and v_scale must be null for a float cache (cache_element=float)"}},
      // Strides.
      {"negative_q_seq_stride",
       [](F& f) { f.params.q_strides.seq = -1; },
       {"q stride of dimension 'seq' must be >= 0, got -1"}},
      {"negative_cache_head_stride",
       [](F& f) { f.params.cache_strides.head = -16; },
       {"k_cache stride of dimension 'head' must be >= 0, got -16"}},
      {"negative_new_batch_stride",
       [](F& f) { f.params.new_strides.batch = -5; },
       {"k_new stride of dimension 'batch' must be >= 0, got -5"}},
      {"negative_o_head_stride",
       [](F& f) { f.params.o_strides.head = -16; },
       {"o stride of dimension 'head' must be >= 0, got -16"}},
      // Outputs overlapping themselves, an input, or each other; the caches are outputs when keys are
      // appended.
      {"o_overlaps_itself",
       [](F& f) { f.params.o_strides.head = 8; },
       {"o overlaps itself", "'head' has stride 8", "span 16 elements"}},
      {"o_is_q", [](F& f) { f.params.o = f.q; }, {"o overlaps q (o bytes ["}},
      {"o_inside_k_cache", [](F& f) { f.params.o = f.k_cache + 5; }, {"o overlaps k_cache"}},
      {"lse_inside_o", [](F& f) { f.params.lse = f.o + 3; }, {"o overlaps lse"}},
      {"lse_is_v_cache", [](F& f) { f.params.lse = f.v_cache; }, {"lse overlaps v_cache"}},
      // v_cache == k_cache is V read inside the K rows: its appends take no v_new. Any other overlap is refused.
      {"k_cache_is_v_cache_with_v_new",
       [](F& f) { f.params.v_cache = f.k_cache; },
       {"v_new must be null when V is read inside the K cache (v_cache == k_cache)"}},
      {"v_cache_inside_k_cache", [](F& f) { f.params.v_cache = f.k_cache + 1; }, {"k_cache overlaps v_cache"}},
      {"k_new_inside_k_cache", [](F& f) { f.params.k_new = f.k_cache + 16; }, {"k_cache overlaps k_new"}},
      {"cache_seqlens_inside_v_cache",
       [](F& f) { f.params.cache_seqlens = reinterpret_cast<const std::int32_t*>(f.v_cache); },
       {"v_cache overlaps cache_seqlens"}},
      {"rotary_cos_inside_k_cache",
       [](F& f) { f.params.rotary_cos = f.k_cache + 1; },
       {"k_cache overlaps rotary_cos"}},
      {"alibi_is_o", [](F& f) { f.params.alibi_slopes = f.o; }, {"o overlaps alibi_slopes"}},
      {"cache_rows_collide", [](F& f) { f.params.cache_strides.head = 0; }, {"k_cache overlaps itself"}},
      {"o_on_the_cache_without_append",
       [](F& f) {
         f.params.seqlen_new = 0;
         f.params.o = f.v_cache;
       },
       {"o overlaps v_cache"}},
      // Masks and modifiers.
      {"window_left_below_minus_one",
       [](F& f) { f.params.window_left = -2; },
       {"window_left must be >= -1, got -2"}},
      {"window_right_below_minus_one",
       [](F& f) { f.params.window_right = -3; },
       {"window_right must be >= -1, got -3"}},
      {"softcap_negative",
       [](F& f) { f.params.softcap = -1.0f; },
       {"softcap must be finite and >= 0 (0 disables it), got -1"}},
      {"softcap_nan", [](F& f) { f.params.softcap = kNaN; }, {"softcap must be finite", "got nan"}},
      {"softcap_infinite", [](F& f) { f.params.softcap = kInf; }, {"softcap must be finite", "got inf"}},
      {"scale_nan", [](F& f) { f.params.scale = kNaN; }, {"scale must be finite, got nan"}},
      {"scale_minus_infinite", [](F& f) { f.params.scale = -kInf; }, {"scale must be finite, got -inf"}},
      {"alibi_batch_stride_negative",
       [](F& f) { f.params.alibi_batch_stride = -1; },
       {"alibi_batch_stride must be >= 0, got -1"}},
      {"alibi_batch_stride_below_heads",
       [](F& f) { f.params.alibi_batch_stride = 3; },
       {"alibi_batch_stride must be 0 (slopes per head) or >= heads_q=4, got 3"}},
      // Execution settings and rotary.
      {"negative_num_splits", [](F& f) { f.params.num_splits = -1; }, {"num_splits must be >= 0, got -1"}},
      {"negative_threads",
       [](F& f) { f.params.num_threads = -1; },
       {"num_threads must be in [0, 1024], got -1"}},
      {"too_many_threads",
       [](F& f) { f.params.num_threads = 5000; },
       {"num_threads must be in [0, 1024], got 5000"}},
      {"rotary_dim_odd", [](F& f) { f.params.rotary_dim = 7; }, {"rotary_dim must be even, got 7"}},
      {"rotary_dim_above_head_dim",
       [](F& f) { f.params.rotary_dim = 18; },
       {"rotary_dim must be in [0, 16], got 18"}},
      {"rotary_dim_negative",
       [](F& f) { f.params.rotary_dim = -2; },
       {"rotary_dim must be in [0, 16], got -2"}},
      {"rotary_max_pos_negative",
       [](F& f) { f.params.rotary_max_pos = -1; },
       {"rotary_max_pos must be >= 0, got -1"}},
      {"rotary_table_too_short",
       [](F& f) { f.params.rotary_max_pos = 19; },
       {"rotary position 19 of sequence 1 (cache_seqlens[1]=18) is beyond", "rotary_max_pos=19"}},
      // Lengths read from cache_seqlens.
      {"negative_cache_seqlen",
       [](F& f) { f.cache_seqlens[2] = -3; },
       {"cache_seqlens[2] must be >= 0, got -3"}},
      // seqlen_new broadcast from one stored key (stride 0) so that only the length is wrong: no overflow.
      {"seqlen_new_near_int64_max",
       [](F& f) {
         f.params.seqlen_new = INT64_MAX;
         f.params.new_strides = {0, 0, 0};
       },
       {"cache_seqlens[0] + seqlen_new = 10 + 9223372036854775807 = more than int64 holds exceeds the cache "
        "capacity of 20 keys"}},
      {"lse_index_overflows",
       [](F& f) {
         f.params.heads_q = f.params.heads_kv = f.params.seqlen_q = kTwoTo32;
         f.params.q_strides = f.params.o_strides = {0, 0, 0};
         f.params.alibi_slopes = nullptr, f.params.alibi_batch_stride = 0;
       },
       {"lse is too large to index in 64 bits (heads_q=4294967296 times seqlen_q=4294967296)"}},
  };
}

std::vector<Row> ContiguousRows() {
  return {
      {"negative_capacity",
       [](F& f) { f.params.cache_seqlen_max = -1; },
       {"cache_seqlen_max must be >= 0, got -1"}},
      {"capacity_exceeded",
       [](F& f) { f.params.cache_seqlen_max = 19; },
       {"cache_seqlens[1] + seqlen_new = 18 + 2 = 20 exceeds the cache capacity of 19 keys "
        "(cache_seqlen_max)"}},
      {"cache_offset_overflows",
       [](F& f) {
         f.params.cache_seqlen_max = std::int64_t{1} << 40;
         f.params.cache_strides.seq = std::int64_t{1} << 40;
       },
       {"k_cache is too large to index in 64 bits", "'seq' of size 1099511627776 with stride 1099511627776"}},
  };
}

std::vector<Row> PagedRows() {
  return {
      {"page_size_zero", [](F& f) { f.params.page_size = 0; }, {"page_size must be >= 1, got 0"}},
      {"negative_num_pages", [](F& f) { f.params.num_pages = -1; }, {"num_pages must be >= 0, got -1"}},
      {"negative_max_pages", [](F& f) { f.params.max_pages = -1; }, {"max_pages must be >= 0, got -1"}},
      {"table_stride_below_max_pages",
       [](F& f) { f.params.block_table_stride = 4; },
       {"block_table_stride must be >= 5, got 4"}},
      {"table_entry_negative",
       [](F& f) { f.block_table[1 * 5 + 2] = -1; },
       {"block_table[1][2] = -1 is out of range [0, num_pages=16)"}},
      {"table_entry_past_the_pages",
       [](F& f) { f.block_table[0] = 16; },
       {"block_table[0][0] = 16 is out of range [0, num_pages=16)"}},
      {"table_entry_int32_max",
       [](F& f) { f.block_table[1 * 5 + 4] = INT32_MAX; },
       {"block_table[1][4] = 2147483647 is out of range"}},
      // Sequence 0 appends keys 10, 11 (its third page, slots 2, 3), sequence 1 keys 18, 19 (its fifth page).
      {"two_sequences_append_to_one_page",
       [](F& f) { f.block_table[1 * 5 + 4] = f.block_table[0 * 5 + 2]; },
       {"two appended keys would be written to the same cache slot (page 1, slot 2)"}},
      {"capacity_exceeded",
       [](F& f) { f.params.max_pages = 4; },
       {"cache_seqlens[1] + seqlen_new = 18 + 2 = 20 exceeds the cache capacity of 16 keys "
        "(max_pages·page_size)"}},
      {"capacity_overflows",
       [](F& f) {
         f.params.max_pages = f.params.page_size = f.params.block_table_stride = std::int64_t{1} << 40;
       },
       {"max_pages·page_size is too large (max_pages=1099511627776 page_size=1099511627776)"}},
      {"block_table_inside_k_cache",
       [](F& f) { f.params.block_table = reinterpret_cast<const std::int32_t*>(f.k_cache); },
       {"k_cache overlaps block_table"}},
      {"block_table_inside_o",
       [](F& f) { f.params.block_table = reinterpret_cast<const std::int32_t*>(f.o + 8); },
       {"o overlaps block_table"}},
  };
}

// An int8 cache with per-token scales (and the FP8 ones' fixed scales): the scales are checked like the cache,
// and the appended values must be finite.
std::vector<Row> QuantizedRows() {
  return {
      {"null_k_scale", [](F& f) { f.params.k_scale = nullptr; }, {"k_scale is a null pointer but holds"}},
      {"k_scale_inside_k_cache",
       [](F& f) { f.params.k_scale = f.k_cache + 2; },
       {"k_cache overlaps k_scale"}},
      {"v_scale_is_o", [](F& f) { f.params.v_scale = f.o; }, {"o overlaps v_scale"}},
      {"negative_scale_seq_stride",
       [](F& f) { f.params.scale_strides.seq = -1; },
       {"k_scale stride of dimension 'seq' must be >= 0, got -1"}},
      {"scale_rows_collide", [](F& f) { f.params.scale_strides.head = 0; }, {"k_scale overlaps itself"}},
      {"group_size_not_a_divisor",
       [](F& f) { f.params.scale_group_size = 5; },
       {"scale_group_size must divide head_dim=16, got 5"}},
      {"group_size_above_head_dim",
       [](F& f) { f.params.scale_group_size = 32; },
       {"scale_group_size must be in [0, 16], got 32"}},
      {"group_size_with_a_fixed_scale",
       [](F& f) {
         f.params.scale_granularity = ScaleGranularity::kPerHead;
         f.params.scale_group_size = 4;
       },
       {"scale_group_size must be 0 with per_head scales"}},
      {"k_new_nan",
       [](F& f) { f.k_new[1 * F::Nnew * F::Hkv * F::d + 17] = kNaN; },
       {"k_new holds nan at (1, 0, 1, 1): a quantized cache stores finite values only"}},
      {"v_new_infinite",
       [](F& f) { f.v_new[5] = -kInf; },
       {"v_new holds -inf at (0, 0, 0, 5)"}},
      {"per_head_scale_zero",
       [](F& f) {
         f.params.scale_granularity = ScaleGranularity::kPerHead;
         f.k_scale[1] = 0.0f;
       },
       {"k_scale[1] must be finite and > 0 to quantize appended keys, got 0"}},
      {"per_tensor_scale_nan",
       [](F& f) {
         f.params.cache_element = CacheElement::kFp8E4M3;
         f.params.scale_granularity = ScaleGranularity::kPerTensor;
         f.v_scale[0] = kNaN;
       },
       {"v_scale[0] must be finite and > 0", "got nan"}},
      {"e5m2_per_head_scale_infinite",
       [](F& f) {
         f.params.cache_element = CacheElement::kFp8E5M2;
         f.params.scale_granularity = ScaleGranularity::kPerHead;
         f.k_scale[0] = kInf;
       },
       {"k_scale[0] must be finite and > 0", "got inf"}},
      {"e5m2_k_new_nan",
       [](F& f) {
         f.params.cache_element = CacheElement::kFp8E5M2;
         f.k_new[3] = kNaN;
       },
       {"k_new holds nan at (0, 0, 0, 3): a quantized cache stores finite values only"}},
      {"e5m2_integer_scores",
       [](F& f) {
         f.params.cache_element = CacheElement::kFp8E5M2;
         f.params.quantize_query_int8 = true;
       },
       {"quantize_query_int8 needs an int8 cache (cache_element=int8), got cache_element=fp8_e5m2"}},
  };
}

TEST(DecodeValidationMatrix, QuantizedCache) {
  for (bool paged : {false, true}) {
    SCOPED_TRACE(paged ? "paged" : "contiguous");
    CheckRejections<F>(
        QuantizedRows(), [paged](F& f) { f.Make(paged, CacheElement::kInt8); }, RunDecode, ValidateOnly);
  }
}

TEST(DecodeValidationMatrix, ContiguousCache) {
  std::vector<Row> rows = CommonRows();
  for (Row& row : ContiguousRows()) rows.push_back(row);
  CheckRejections<F>(
      rows, [](F& f) { f.Make(false); }, RunDecode, ValidateOnly);
}

TEST(DecodeValidationMatrix, PagedCache) {
  std::vector<Row> rows = CommonRows();
  for (Row& row : PagedRows()) rows.push_back(row);
  CheckRejections<F>(
      rows, [](F& f) { f.Make(true); }, RunDecode, ValidateOnly);
}

// The fixtures' calls are valid, so each rejection above is due to its one change alone; the padding entries
// (−7) of the block table are not read.
TEST(DecodeValidationMatrix, FixtureCallsAreAcceptedAndWriteOAndLse) {
  for (bool paged : {false, true}) {
    SCOPED_TRACE(paged ? "paged" : "contiguous");
    F f;
    f.Make(paged);
    ASSERT_NO_THROW(decode(f.params));
    for (std::int64_t n = 0; n < F::B * F::Nq * F::Hq * F::d; ++n) ASSERT_TRUE(std::isfinite(f.o[n])) << n;
    for (std::int64_t n = 0; n < F::B * F::Hq * F::Nq; ++n) ASSERT_TRUE(std::isfinite(f.lse[n])) << n;
    for (const CacheElement element : {CacheElement::kInt8, CacheElement::kFp8E4M3, CacheElement::kFp8E5M2}) {
      F quantized;
      quantized.Make(paged, element);
      ASSERT_NO_THROW(decode(quantized.params)) << to_string(element);
      if (element != CacheElement::kInt8) continue;  // random bytes may hold FP8's inf and NaN; int8 has none
      for (std::int64_t n = 0; n < F::B * F::Nq * F::Hq * F::d; ++n) ASSERT_TRUE(std::isfinite(quantized.o[n])) << n;
    }
  }
}

}  // namespace
}  // namespace flashattn::testing
