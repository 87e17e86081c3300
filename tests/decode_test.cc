// decode() (include/flashattn/decode.h) against forward() over the same cache contents, across cache
// layouts, split counts, masks, element types and rotary styles; the in-place append; the split heuristic.
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "common/element.h"
#include "decode_test_case.h"
#include "flashattn/decode.h"
#include "reference/reference.h"
#include "simd/targets.h"
#include "test_targets.h"

namespace flashattn::testing {
namespace {

// Normwise O tolerance against forward(): both accumulate in float32 and round O once to the element type,
// so they may differ by about one rounding of the output type.
double Tolerance(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 2e-5;
    case DType::kF16: return 2e-3;
    case DType::kBF16: return 1.6e-2;
  }
  return 0.0;
}

DecodeShape BatchShape(DType dtype, std::int64_t page_size, std::int64_t Nq, std::int64_t Nnew) {
  // Three sequences: a long one, a short one, and one whose cache starts empty. d = 37 exercises the
  // scalar tail after the SIMD lanes; Hq/Hkv = 3 groups three query heads per K/V head.
  return DecodeShape{.Nq = Nq, .Nnew = Nnew, .Hq = 6, .Hkv = 2, .d = 37, .Nmax = 160,
                     .cached = {150 - static_cast<std::int32_t>(Nnew), 41, 0}, .dtype = dtype, .page_size = page_size};
}

using Config = std::tuple<DType, std::int64_t /*page_size*/, std::int64_t /*Nq*/, std::int64_t /*Nnew*/, int /*mods*/>;

DecodeMods ModsFor(int index) {
  switch (index) {
    case 0: return {};
    case 1: return {.causal = true};
    case 2: return {.causal = true, .window_left = 20, .softcap = 15.0f, .alibi = true};
    default: return {.window_left = 30, .window_right = 1, .rotary_dim = 16, .interleaved = true};
  }
}

class DecodeMatchesForward : public ::testing::TestWithParam<Config> {};

TEST_P(DecodeMatchesForward, OverTheSameCacheContents) {
  const auto [dtype, page_size, Nq, Nnew, mods_index] = GetParam();
  DecodeCase c(BatchShape(dtype, page_size, Nq, Nnew), ModsFor(mods_index), 100 + mods_index);
  c.params().num_splits = 3;
  decode(c.params());
  const Errors vs_default = CompareWithForward(c, std::nullopt);  // forward()'s default algorithm
  EXPECT_LE(vs_default.o_error, Tolerance(dtype)) << c.shape().ToString() << " " << ModsFor(mods_index).ToString();
  EXPECT_LE(vs_default.lse_error, 1e-5);
  // And against the float64 oracle: within the same bound.
  const Errors vs_oracle = CompareWithForward(c, Algorithm::kOracle);
  EXPECT_LE(vs_oracle.o_error, Tolerance(dtype));
  EXPECT_LE(vs_oracle.lse_error, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, DecodeMatchesForward,
                         ::testing::Combine(::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                                            ::testing::Values(0, 3), ::testing::Values(1, 4),
                                            ::testing::Values(0, 4), ::testing::Values(0, 1, 2, 3)));

TEST(Decode, AnySplitCountGivesTheSameResultWithinRounding) {
  const DecodeShape shape{.Nq = 2, .Nnew = 1, .Hq = 8, .Hkv = 1, .d = 64, .Nmax = 1100, .cached = {1099, 333},
                          .dtype = DType::kF32};
  DecodeCase base(shape, DecodeMods{.causal = true}, 21);
  base.params().num_splits = 1;
  decode(base.params());
  for (std::int64_t splits : {0, 2, 3, 7, 64, 5000}) {
    DecodeCase c(shape, DecodeMods{.causal = true}, 21);
    c.params().num_splits = splits;
    decode(c.params());
    double max_diff = 0.0;
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t i = 0; i < shape.Nq; ++i)
        for (std::int64_t h = 0; h < shape.Hq; ++h) {
          for (std::int64_t e = 0; e < shape.d; ++e) {
            max_diff = std::max(max_diff, std::fabs(double(c.O(b, i, h, e)) - base.O(b, i, h, e)));
          }
          EXPECT_NEAR(c.Lse(b, h, i), base.Lse(b, h, i), 1e-5) << "splits " << splits;
        }
    EXPECT_LE(max_diff, 1e-5) << "splits " << splits;
  }
}

// LSE is optional: without it (lse = nullptr) O is the same, bit for bit, split or not, with keys appended.
TEST(Decode, WithoutLseGivesTheSameOutput) {
  for (std::int64_t splits : {1, 3}) {
    const DecodeShape shape = BatchShape(DType::kF16, /*page_size=*/3, /*Nq=*/2, /*Nnew=*/2);
    DecodeCase with_lse(shape, DecodeMods{.causal = true, .alibi = true}, 31);
    DecodeCase without(shape, DecodeMods{.causal = true, .alibi = true}, 31);
    with_lse.params().num_splits = without.params().num_splits = splits;
    without.params().lse = nullptr;
    decode(with_lse.params());
    decode(without.params());
    EXPECT_LE(CompareWithForward(with_lse, std::nullopt).o_error, Tolerance(DType::kF16)) << "splits " << splits;
    EXPECT_EQ(without.CacheSnapshot(), with_lse.CacheSnapshot()) << "splits " << splits;
    for (std::int64_t b = 0; b < with_lse.batch(); ++b)
      for (std::int64_t i = 0; i < shape.Nq; ++i)
        for (std::int64_t h = 0; h < shape.Hq; ++h)
          for (std::int64_t e = 0; e < shape.d; ++e) {
            ASSERT_EQ(without.O(b, i, h, e), with_lse.O(b, i, h, e)) << "splits " << splits;
          }
  }
}

TEST(Decode, PagedEqualsContiguousForEveryPageSize) {
  for (DType dtype : {DType::kF16, DType::kF32}) {
    const auto shape = [dtype](std::int64_t page_size) {
      return DecodeShape{.Nq = 2, .Nnew = 2, .Hq = 4, .Hkv = 2, .d = 64, .Nmax = 600, .cached = {517, 300, 0},
                         .dtype = dtype, .page_size = page_size};
    };
    DecodeCase contiguous(shape(0), DecodeMods{.causal = true}, 5);
    contiguous.params().num_splits = 2;
    decode(contiguous.params());
    for (std::int64_t page_size : {1, 3, 16, 256}) {
      DecodeCase paged(shape(page_size), DecodeMods{.causal = true}, 5);
      paged.params().num_splits = 2;
      decode(paged.params());
      // Same keys in the same order through the same kernel: the results are identical, not just close.
      for (std::int64_t b = 0; b < 3; ++b)
        for (std::int64_t i = 0; i < 2; ++i)
          for (std::int64_t h = 0; h < 4; ++h) {
            for (std::int64_t e = 0; e < 64; ++e)
              ASSERT_EQ(paged.O(b, i, h, e), contiguous.O(b, i, h, e)) << "page size " << page_size;
            ASSERT_EQ(paged.Lse(b, h, i), contiguous.Lse(b, h, i)) << "page size " << page_size;
          }
    }
  }
}

// After decode(), cache row cached[b] + i of every K/V head holds k_new (rotated) and v_new; every other
// element of both caches, including unused pages, keeps its bytes.
void CheckAppend(std::int64_t page_size, const DecodeMods& mods, DType dtype) {
  const DecodeShape shape{.Nq = 3, .Nnew = 3, .Hq = 4, .Hkv = 2, .d = 32, .Nmax = 40, .cached = {37, 0, 12},
                          .dtype = dtype, .page_size = page_size};
  DecodeCase c(shape, mods, 9);
  const std::vector<std::uint16_t> before = c.CacheSnapshot();
  decode(c.params());
  const std::vector<std::uint16_t> after = c.CacheSnapshot();
  const std::int64_t slots = dtype == DType::kF32 ? 2 : 1, half = static_cast<std::int64_t>(before.size()) / 2;
  std::vector<bool> appended(before.size(), false);
  for (std::int64_t b = 0; b < 3; ++b)
    for (std::int64_t i = 0; i < shape.Nnew; ++i)
      for (std::int64_t hk = 0; hk < shape.Hkv; ++hk) {
        const std::int64_t j = shape.cached[b] + i;
        std::vector<float> k = c.KNewRow(b, i, hk);
        if (mods.rotary_dim > 0) k = PlainRotary(k, mods.rotary_dim, c.RotaryCos(j), c.RotarySin(j), mods.interleaved);
        const std::vector<float> v = c.VNewRow(b, i, hk), k_got = c.KRow(b, j, hk), v_got = c.VRow(b, j, hk);
        for (std::int64_t e = 0; e < shape.d; ++e) {
          // Rotary is computed in float32 by decode and in float64 here: at most one rounding apart.
          const double tolerance = mods.rotary_dim > 0 ? Tolerance(dtype) * 4 : 0.0;
          EXPECT_NEAR(k_got[e], RoundTo(dtype, k[e]), tolerance) << b << " " << j;
          EXPECT_EQ(v_got[e], v[e]);
        }
        const std::int64_t offset = c.CacheOffset(b, j, hk) * slots;
        for (std::int64_t n = 0; n < shape.d * slots; ++n) appended[offset + n] = appended[half + offset + n] = true;
      }
  std::int64_t changed_elsewhere = 0;
  for (std::size_t n = 0; n < before.size(); ++n) changed_elsewhere += !appended[n] && before[n] != after[n];
  EXPECT_EQ(changed_elsewhere, 0);
}

TEST(Decode, AppendedKeysLandInTheirSlotsAndNothingElseChanges) {
  for (std::int64_t page_size : {0, 1, 3, 16})
    for (DType dtype : {DType::kF32, DType::kBF16}) CheckAppend(page_size, DecodeMods{.causal = true}, dtype);
}

TEST(Decode, RotaryMatchesThePlainReferenceInBothStyles) {
  for (bool interleaved : {true, false})
    for (std::int64_t rotary_dim : {32, 10}) {  // all of d, and a prefix of it
      const DecodeMods mods{.causal = true, .rotary_dim = rotary_dim, .interleaved = interleaved};
      CheckAppend(3, mods, DType::kF32);
      CheckAppend(0, mods, DType::kF16);
      // q is rotated at cache_seqlens[b] + i: the forward pass over PlainRotary(q) agrees.
      const DecodeShape shape{.Nq = 2, .Nnew = 2, .Hq = 4, .Hkv = 2, .d = 32, .Nmax = 90, .cached = {70, 5}};
      DecodeCase c(shape, mods, 13);
      decode(c.params());
      EXPECT_LE(CompareWithForward(c, Algorithm::kOracle).o_error, Tolerance(DType::kF32)) << mods.ToString();
      // With rotary_queries_at_cache_end every query is rotated at cache_seqlens[b] (flash-attn's rule
      // without causal or window), the new keys still at cache_seqlens[b] + i.
      DecodeCase at_end(shape, DecodeMods{.rotary_dim = rotary_dim, .interleaved = interleaved}, 13);
      at_end.params().rotary_queries_at_cache_end = true;
      decode(at_end.params());
      EXPECT_LE(CompareWithForward(at_end, Algorithm::kOracle).o_error, Tolerance(DType::kF32))
          << at_end.mods().ToString();
    }
}

TEST(Decode, RotaryStylesDiffer) {
  // Guards the test above: the two pairings give different results, so each is checked for real.
  std::vector<float> x(8);
  for (int e = 0; e < 8; ++e) x[e] = static_cast<float>(e + 1);
  const float cos[4] = {0.5f, 0.6f, 0.7f, 0.8f}, sin[4] = {0.8660254f, 0.8f, 0.71414284f, 0.6f};
  EXPECT_NE(PlainRotary(x, 8, cos, sin, true), PlainRotary(x, 8, cos, sin, false));
}

TEST(Decode, AgreesWithTheReferenceDecode) {
  for (std::int64_t page_size : {0, 3}) {
    const DecodeShape shape = BatchShape(DType::kBF16, page_size, 3, 2);
    const DecodeMods mods{.causal = page_size == 0, .softcap = 10.0f, .alibi = true, .rotary_dim = 8};
    DecodeCase fast(shape, mods, 17), slow(shape, mods, 17);
    // Not causal: every query rotated at cache_seqlens[b], as flash_attn_with_kvcache asks then.
    fast.params().rotary_queries_at_cache_end = slow.params().rotary_queries_at_cache_end = !mods.causal;
    decode(fast.params());
    slow.params().num_splits = 4;
    validate(slow.params());
    reference::Decode(slow.params());
    EXPECT_EQ(fast.CacheSnapshot(), slow.CacheSnapshot());
    double max_diff = 0.0;
    for (std::int64_t b = 0; b < fast.batch(); ++b)
      for (std::int64_t i = 0; i < shape.Nq; ++i)
        for (std::int64_t h = 0; h < shape.Hq; ++h) {
          for (std::int64_t e = 0; e < shape.d; ++e) {
            max_diff = std::max(max_diff, std::fabs(double(fast.O(b, i, h, e)) - slow.O(b, i, h, e)));
          }
          if (std::isinf(slow.Lse(b, h, i))) EXPECT_EQ(fast.Lse(b, h, i), slow.Lse(b, h, i));
          else EXPECT_NEAR(fast.Lse(b, h, i), slow.Lse(b, h, i), 1e-4);
        }
    EXPECT_LE(max_diff, 2 * 0.0078125);  // two bfloat16 roundings of values below 2
  }
}

// The decode kernel on every SIMD target compiled in, for each of its paths: rows read straight from the
// cache (d a multiple of every target's vector) and widened into float32 blocks (d = 37), every row-tile
// size and combination of them (R = 1, 2, 3, 4, 6, 8, 9, 16), the whole-block passes of many rows (R = 32,
// 36), contiguous and paged caches, a full and a partial last block of keys, against the float64 oracle.
TEST(Decode, EveryTargetEveryRowTileAgainstTheOracle) {
  const std::vector<std::int64_t> targets = TargetsUnderTest();
  ASSERT_FALSE(targets.empty());
  struct Rows {
    std::int64_t Hq, Hkv, Nq;
  };
  const Rows row_counts[] = {{2, 2, 1}, {4, 2, 1}, {3, 1, 1}, {8, 2, 1}, {3, 1, 2}, {8, 1, 1}, {9, 3, 3}, {8, 2, 4},
                              {32, 1, 1}, {12, 1, 3}};
  for (const DType dtype : {DType::kF32, DType::kF16}) {
    for (const std::int64_t d : {64, 37, 128}) {
      for (const Rows& rows : row_counts) {
        for (const std::int64_t page_size : {0, 5}) {
          for (const bool causal : {false, true}) {
            const DecodeShape shape{.Nq = rows.Nq, .Hq = rows.Hq, .Hkv = rows.Hkv, .d = d, .Nmax = 100,
                                    .cached = {100, 45}, .dtype = dtype, .page_size = page_size};
            DecodeCase c(shape, DecodeMods{.causal = causal}, 31);
            for (const std::int64_t target : targets) {
              simd::RestrictTargetForTest(target);
              decode(c.params());
              const Errors errors = CompareWithForward(c, Algorithm::kOracle);
              EXPECT_LE(errors.o_error, Tolerance(dtype)) << shape.ToString() << " causal " << causal << " on "
                                                    << simd::TargetName(target);
              EXPECT_LE(errors.lse_error, 1e-5) << shape.ToString() << " on " << simd::TargetName(target);
            }
            simd::RestrictTargetForTest(0);
          }
        }
      }
    }
  }
}

TEST(Decode, RowsThatSeeNoKeyGetZerosAndNegInfLse) {
  // An empty cache, nothing appended: every row is empty.
  DecodeCase c(DecodeShape{.Nq = 2, .Hq = 2, .Hkv = 1, .d = 8, .Nmax = 4, .cached = {0}}, DecodeMods{}, 3);
  decode(c.params());
  for (std::int64_t i = 0; i < 2; ++i)
    for (std::int64_t h = 0; h < 2; ++h) {
      EXPECT_EQ(c.Lse(0, h, i), -std::numeric_limits<float>::infinity());
      for (std::int64_t e = 0; e < 8; ++e) EXPECT_EQ(c.O(0, i, h, e), 0.0f);
    }
}

TEST(Decode, SplitHeuristic) {
  // Enough sequences for two work items per thread: no split.
  EXPECT_EQ(choose_num_splits(4, 32768, 2), 1);
  EXPECT_EQ(choose_num_splits(9, 32768, 4), 1);
  // One sequence on two threads: four chunks; three sequences: two chunks each.
  EXPECT_EQ(choose_num_splits(1, 131072, 2), 4);
  EXPECT_EQ(choose_num_splits(3, 131072, 2), 2);
  // Short caches are not split below 512 keys per chunk.
  EXPECT_EQ(choose_num_splits(1, 1000, 2), 1);
  EXPECT_EQ(choose_num_splits(1, 1100, 2), 2);
  EXPECT_EQ(choose_num_splits(1, 100, 2), 1);
}

}  // namespace
}  // namespace flashattn::testing
