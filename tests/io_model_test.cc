// The closed forms of tools/io_model/ against the counted runs: over a grid of shapes, fast memory sizes or
// block sizes, splits and masks (tails included), the counted traffic equals the model exactly, in elements
// and in bytes, for standard, flash1, flash2, the fused kernel's loops and decode's. The counted fused and
// decode loops also compute attention (checked against the float64 oracle). Also standard's 4Nd + 4N²
// (docs/algorithms.md §3), and the tile-skipping model against a brute-force count.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "forward/forward.h"
#include "io_model/io_model.h"
#include "reference/problem.h"
#include "reference/reference.h"
#include "simd/targets.h"
#include "test_problem.h"
#include "test_targets.h"

namespace flashattn::testing {
namespace {

void ExpectEqual(const io_model::IoCount& counted, const io_model::IoCount& model) {
  EXPECT_EQ(counted.read, model.read);
  EXPECT_EQ(counted.written, model.written);
  EXPECT_EQ(counted.read_bytes, model.read_bytes);
  EXPECT_EQ(counted.written_bytes, model.written_bytes);
}

io_model::Cost Model(Algorithm algorithm, const AttentionParams& params) {
  switch (algorithm) {
    case Algorithm::kStandard: return io_model::Standard(params);
    case Algorithm::kFlash1: return io_model::Flash1(params);
    default: return io_model::Flash2(params);
  }
}

// (Nq, Nk, d, M in bytes, causal). M = 700 bytes with d = 40 gives Bc = Br = 2, with d = 1 Bc = 44, Br = 1;
// the odd lengths leave tails in both directions.
using GridCase = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, bool>;

class IoModelGridTest : public ::testing::TestWithParam<std::tuple<Algorithm, GridCase>> {};

TEST_P(IoModelGridTest, CountedTrafficEqualsClosedForm) {
  const auto& [algorithm, grid] = GetParam();
  const auto& [Nq, Nk, d, M, causal] = grid;
  Problem problem({.Nq = Nq, .Nk = Nk, .d = d, .dv = d}, {.causal = causal}, /*seed=*/Nq * 31 + Nk);
  problem.params().tiling.fast_memory_bytes = M;
  ExpectEqual(io_model::RunCounted(problem.params(), algorithm), Model(algorithm, problem.params()).io);
}

std::vector<GridCase> Grid() {
  std::vector<GridCase> grid;
  for (auto [Nq, Nk] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {1, 1}, {16, 16}, {64, 64}, {97, 113}, {113, 97}, {1, 200}, {200, 1}, {129, 129}})
    for (std::int64_t d : {1, 16, 40})
      for (std::int64_t M : {700, 1024, 3000, 1 << 16})
        for (bool causal : {false, true}) grid.emplace_back(Nq, Nk, d, M, causal);
  return grid;
}

INSTANTIATE_TEST_SUITE_P(Grid, IoModelGridTest,
                         ::testing::Combine(::testing::Values(Algorithm::kStandard, Algorithm::kFlash1,
                                                              Algorithm::kFlash2),
                                            ::testing::ValuesIn(Grid())));

// Batches, GQA, d ≠ dv, float16 bytes, no LSE, explicit block sizes, the head-major layout, windows.
class IoModelShapeTest : public ::testing::TestWithParam<std::tuple<Algorithm, int>> {};

TEST_P(IoModelShapeTest, CountedTrafficEqualsClosedForm) {
  const auto& [algorithm, variant] = GetParam();
  Shape shape{.batch = 2, .Nq = 37, .Nk = 53, .Hq = 4, .Hkv = 2, .d = 24, .dv = 40};
  Modifiers modifiers;
  if (variant == 1) shape.dtype = DType::kF16;
  if (variant == 2) shape.dtype = DType::kBF16, shape.head_major = true;
  if (variant == 4) modifiers = {.window_left = 5, .window_right = 3};
  Problem problem(shape, modifiers, /*seed=*/variant);
  if (variant == 3) problem.params().lse = nullptr;
  if (variant == 4) problem.params().tiling = {.fast_memory_bytes = 0, .block_rows = 7, .block_cols = 11};
  if (variant == 5) problem.params().num_threads = 1;
  ExpectEqual(io_model::RunCounted(problem.params(), algorithm), Model(algorithm, problem.params()).io);
}

INSTANTIATE_TEST_SUITE_P(Shapes, IoModelShapeTest,
                         ::testing::Combine(::testing::Values(Algorithm::kStandard, Algorithm::kFlash1,
                                                              Algorithm::kFlash2),
                                            ::testing::Range(0, 6)));

TEST(IoModelTest, StandardIsFourNdPlusFourNSquared) {
  for (std::int64_t N : {1, 64, 1000, 4096})
    for (std::int64_t d : {16, 64, 128}) {
      AttentionParams params;
      params.seqlen_q = params.seqlen_k = N;
      params.head_dim = d;
      const io_model::Cost cost = io_model::Standard(params);  // no LSE requested, as in docs/algorithms.md §3
      EXPECT_EQ(cost.io.read + cost.io.written, 4 * N * d + 4 * N * N) << "N=" << N << " d=" << d;
      EXPECT_EQ(cost.io.read_bytes + cost.io.written_bytes, 4 * (4 * N * d + 4 * N * N));
    }
}

TEST(IoModelTest, BatchAndHeadsMultiplyThePerHeadCount) {
  AttentionParams one;
  one.seqlen_q = 300, one.seqlen_k = 500, one.head_dim = 64;
  AttentionParams many = one;
  many.batch = 3, many.heads_q = 8, many.heads_kv = 2;
  for (auto model : {io_model::Standard, io_model::Flash1, io_model::Flash2}) {
    EXPECT_EQ(model(many).io.read, 24 * model(one).io.read);
    EXPECT_EQ(model(many).io.written_bytes, 24 * model(one).io.written_bytes);
    EXPECT_EQ(model(many).flops, 24 * model(one).flops);
  }
}

// The tile-skipping form against an enumeration of every tile and every (row, key) pair in it.
TEST(IoModelTest, SkippingModelReadsExactlyTheTilesHoldingAVisibleKey) {
  struct Case {
    std::int64_t Nq, Nk, Br, Bc, left, right;
    bool causal;
  };
  for (const Case& c : std::vector<Case>{{97, 113, 16, 24, -1, -1, true},
                                         {113, 97, 7, 5, -1, -1, true},
                                         {64, 64, 8, 8, -1, -1, false},
                                         {50, 200, 9, 13, 20, 3, false},
                                         {200, 50, 9, 13, 0, 0, false},
                                         {31, 31, 4, 6, 5, -1, true},
                                         {10, 300, 3, 17, 2, 1, false}}) {
    Problem problem({.Nq = c.Nq, .Nk = c.Nk, .d = 8, .dv = 8},
                    {.causal = c.causal, .window_left = c.left, .window_right = c.right}, /*seed=*/1);
    const AttentionParams& params = problem.params();
    const reference::HeadProblem head(params, 0, 0);
    std::int64_t key_rows_read = 0;
    for (std::int64_t i0 = 0; i0 < c.Nq; i0 += c.Br)
      for (std::int64_t j0 = 0; j0 < c.Nk; j0 += c.Bc) {
        bool visible = false;
        for (std::int64_t r = i0; r < std::min(c.Nq, i0 + c.Br); ++r)
          for (std::int64_t k = j0; k < std::min(c.Nk, j0 + c.Bc); ++k) visible |= head.Visible(r, k);
        if (visible) key_rows_read += std::min(c.Bc, c.Nk - j0);
      }
    const io_model::Cost cost = io_model::Flash2SkippingMaskedTiles(params, c.Br, c.Bc);
    EXPECT_EQ(cost.io.read, c.Nq * 8 + key_rows_read * 16) << "Nq=" << c.Nq << " Nk=" << c.Nk;
  }
}

TEST(IoModelTest, SkippingModelWithoutMaskEqualsFlash2) {
  Problem problem({.Nq = 97, .Nk = 113, .d = 40, .dv = 40}, {}, /*seed=*/2);
  const auto [Br, Bc] = reference::ChooseBlockSizes(problem.params());
  EXPECT_EQ(io_model::Flash2SkippingMaskedTiles(problem.params(), Br, Bc).io,
            io_model::Flash2(problem.params()).io);
}

// ---- The fused kernel's loops ---------------------------------------------------------------------------

void ExpectFusedCountEqualsModel(const AttentionParams& params) {
  ExpectEqual(io_model::RunCounted(params, Algorithm::kFused), io_model::Fused(params).io);
}

// (Nq, Nk, d, Br×Bc, causal). Br×Bc = 0×0 is the kernel's own choice from the detected L2, clamped to the
// sequences; the others leave tails in both directions, and Bc = 7, 33 are not whole panels.
using Blocks = std::pair<std::int64_t, std::int64_t>;  // Br, Bc
using FusedCase = std::tuple<std::int64_t, std::int64_t, std::int64_t, Blocks, bool>;

class IoModelFusedGridTest : public ::testing::TestWithParam<FusedCase> {};

TEST_P(IoModelFusedGridTest, CountedTrafficEqualsClosedForm) {
  const auto& [Nq, Nk, d, blocks, causal] = GetParam();
  Problem problem({.Nq = Nq, .Nk = Nk, .d = d, .dv = d}, {.causal = causal}, /*seed=*/Nq * 31 + Nk);
  problem.params().tiling.block_rows = blocks.first;
  problem.params().tiling.block_cols = blocks.second;
  ExpectFusedCountEqualsModel(problem.params());
}

std::vector<FusedCase> FusedGrid() {
  std::vector<FusedCase> grid;
  for (auto [Nq, Nk] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {1, 1}, {16, 16}, {64, 64}, {97, 113}, {113, 97}, {1, 200}, {200, 1}, {129, 129}})
    for (std::int64_t d : {1, 16, 40})
      for (Blocks blocks : std::vector<Blocks>{{0, 0}, {5, 7}, {16, 32}, {64, 33}})
        for (bool causal : {false, true}) grid.emplace_back(Nq, Nk, d, blocks, causal);
  return grid;
}

INSTANTIATE_TEST_SUITE_P(Grid, IoModelFusedGridTest, ::testing::ValuesIn(FusedGrid()));

// Batches, GQA, d ≠ dv (dv not a multiple of any vector width), float16/bfloat16 bytes (packed as float32,
// and with 6-row Q blocks in float16), the head-major layout, no LSE, windows, one thread, the kernel's
// default blocks, and the modifiers that do not change the traffic (softcap, ALiBi, a boolean mask, dropout).
class IoModelFusedShapeTest : public ::testing::TestWithParam<int> {};

TEST_P(IoModelFusedShapeTest, CountedTrafficEqualsClosedForm) {
  const int variant = GetParam();
  Shape shape{.batch = 2, .Nq = 37, .Nk = 53, .Hq = 4, .Hkv = 2, .d = 24, .dv = 40};
  Modifiers modifiers;
  if (variant == 1 || variant == 8) shape.dtype = DType::kF16;
  if (variant == 2) shape.dtype = DType::kBF16, shape.head_major = true;
  if (variant == 4) modifiers = {.window_left = 5, .window_right = 3};
  if (variant == 6) modifiers = {.causal = true, .softcap = 5.0f, .alibi = true, .mask = MaskKind::kBool};
  Problem problem(shape, modifiers, /*seed=*/variant);
  problem.params().tiling = {.fast_memory_bytes = 0, .block_rows = 8, .block_cols = 20};
  if (variant == 3) problem.params().lse = nullptr;
  if (variant == 4) problem.params().tiling = {.fast_memory_bytes = 0, .block_rows = 7, .block_cols = 11};
  if (variant == 5) problem.params().num_threads = 1;
  if (variant == 6) problem.params().dropout_p = 0.2f;
  if (variant == 7) problem.params().tiling = {};
  if (variant == 8) problem.params().tiling = {.fast_memory_bytes = 0, .block_rows = 6, .block_cols = 20};
  ExpectFusedCountEqualsModel(problem.params());
}

INSTANTIATE_TEST_SUITE_P(Shapes, IoModelFusedShapeTest, ::testing::Range(0, 9));

// float16/bfloat16 K and V are packed as float32 when a Q block has more than one register tile of 6 rows,
// and in their own type otherwise (forward_kernel::PacksKvWide); float32 is packed as float32.
TEST(IoModelTest, PackedElementBytesFollowTheKernelsRule) {
  AttentionParams p;
  p.seqlen_q = p.seqlen_k = 100;
  p.head_dim = 64;
  const auto bytes = [&](DType dtype, std::int64_t block_rows) {
    p.dtype = dtype;
    p.tiling = {.fast_memory_bytes = 0, .block_rows = block_rows, .block_cols = 32};
    return io_model::FusedGeometryOf(p).packed_element_bytes;
  };
  EXPECT_EQ(bytes(DType::kF16, 7), 4);
  EXPECT_EQ(bytes(DType::kBF16, 64), 4);
  EXPECT_EQ(bytes(DType::kF16, 6), 2);
  EXPECT_EQ(bytes(DType::kBF16, 1), 2);
  EXPECT_EQ(bytes(DType::kF32, 64), 4);
  EXPECT_EQ(bytes(DType::kF32, 6), 4);
  p.seqlen_q = 5;  // the block is clamped to the 5 rows there are
  EXPECT_EQ(bytes(DType::kF16, 64), 2);
}

// The padding of K to whole panels and of V rows to whole vectors depends on the SIMD target: the count and
// the model agree on every target compiled in that this CPU runs, and the lanes are the target's.
TEST(IoModelTest, FusedCountedTrafficEqualsClosedFormOnEveryTarget) {
  const std::vector<std::int64_t> targets = TargetsUnderTest();
  ASSERT_FALSE(targets.empty());
  for (std::int64_t target : targets) {
    simd::RestrictTargetForTest(target);
    const std::string name = simd::TargetName(target);
    const std::int64_t lanes =
        name.rfind("AVX3", 0) == 0 ? 16 : name == "AVX2" ? 8 : name == "SCALAR" ? 1 : 4;  // SSE*, EMU128: 4
    EXPECT_EQ(io_model::FusedFloatLanes(), lanes) << name;
    Problem problem({.batch = 1, .Nq = 37, .Nk = 53, .Hq = 2, .Hkv = 1, .d = 24, .dv = 40}, {.causal = true},
                    /*seed=*/7);
    problem.params().tiling = {.fast_memory_bytes = 0, .block_rows = 8, .block_cols = 20};
    ExpectFusedCountEqualsModel(problem.params());
  }
  simd::RestrictTargetForTest(0);
}

// When the blocks are whole panels and whole vectors, the fused kernel is flash2 with tile skipping plus the
// packing: K and V read once and written once per (batch, K/V head).
TEST(IoModelTest, FusedIsTileSkippingFlash2PlusPackingWhenNothingIsPadded) {
  const std::int64_t L = io_model::FusedFloatLanes(), Bc = 4 * L;  // two panels of 2L keys
  AttentionParams params;
  params.batch = 2, params.heads_q = 4, params.heads_kv = 2;
  params.seqlen_q = 100, params.seqlen_k = 3 * Bc, params.head_dim = 2 * L, params.head_dim_v = 3 * L;
  params.causal = true;
  params.tiling.block_rows = 24, params.tiling.block_cols = Bc;
  ASSERT_TRUE(io_model::FusedGeometryOf(params).packs_v);
  const io_model::IoCount skipping = io_model::Flash2SkippingMaskedTiles(params, 24, Bc).io;
  const std::int64_t packed = 2 * 2 * params.seqlen_k * (params.head_dim + params.value_head_dim());
  EXPECT_EQ(io_model::Fused(params).io.read, skipping.read + packed);
  EXPECT_EQ(io_model::Fused(params).io.written, skipping.written + packed);
}

// K and V of one head beyond the kernel's 16 MiB packing budget: V_j is read from the caller per tile.
TEST(IoModelTest, FusedCountedTrafficEqualsClosedFormWhenVIsNotPacked) {
  Problem problem({.Nq = 3, .Nk = 8200, .d = 512, .dv = 512}, {}, /*seed=*/4);
  ASSERT_FALSE(io_model::FusedGeometryOf(problem.params()).packs_v);
  ExpectFusedCountEqualsModel(problem.params());
}

TEST(IoModelTest, FusedGeometryIsTheKernelsTilingClampedToTheSequences) {
  AttentionParams params;
  params.seqlen_q = 5, params.seqlen_k = 7, params.head_dim = 16;
  io_model::FusedGeometry g = io_model::FusedGeometryOf(params);
  EXPECT_EQ(g.Br, 5);
  EXPECT_EQ(g.Bc, 7);
  EXPECT_EQ(g.Tr, 1);
  EXPECT_EQ(g.Tc, 1);
  EXPECT_EQ(g.Bc_pad, g.NR);
  EXPECT_EQ(g.dv_pad, (16 + g.L - 1) / g.L * g.L);
  params.seqlen_q = params.seqlen_k = 100000;
  g = io_model::FusedGeometryOf(params);
  const forward_kernel::FusedTiling tiling = forward_kernel::ChooseFusedTiling(params);
  EXPECT_EQ(g.Br, tiling.Br);
  EXPECT_EQ(g.Bc, tiling.Bc);
  EXPECT_EQ(io_model::Fused(params).Br, tiling.Br);
  EXPECT_EQ(io_model::Fused(params).Bc, tiling.Bc);
}

TEST(IoModelTest, FusedCallWithoutQueryRowsMovesNothing) {
  AttentionParams params;
  params.seqlen_q = 0, params.seqlen_k = 64, params.head_dim = 16;
  EXPECT_EQ(io_model::Fused(params).io, io_model::IoCount{});
}

// The counted loops are attention, not just counters.
TEST(IoModelTest, CountedFusedLoopComputesAttention) {
  for (const auto& tiling : {Tiling{}, Tiling{.fast_memory_bytes = 0, .block_rows = 7, .block_cols = 11}}) {
    Problem problem({.batch = 2, .Nq = 37, .Nk = 53, .Hq = 4, .Hkv = 2, .d = 24, .dv = 40},
                    {.causal = true, .window_left = 20, .softcap = 5.0f, .alibi = true}, /*seed=*/5);
    problem.params().tiling = tiling;
    io_model::RunCounted(problem.params(), Algorithm::kFused);
    const Errors errors = CompareWithOracle(problem);
    EXPECT_LE(errors.o_error, 1e-5);
    EXPECT_LE(errors.lse_error, 1e-5);
  }
}

// ---- decode's loops ---------------------------------------------------------------------------------------

// (Nq, Nk, d, splits, band): band 0 = none, 1 = causal, 2 = causal with window_left 3. Splits beyond the
// keys leave empty chunks; Nq > Nk under a causal mask leaves rows that see no key.
using DecodeCase = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, int>;

class IoModelDecodeGridTest : public ::testing::TestWithParam<DecodeCase> {};

Modifiers Band(int band) {
  if (band == 1) return {.causal = true};
  if (band == 2) return {.causal = true, .window_left = 3};
  return {};
}

TEST_P(IoModelDecodeGridTest, CountedTrafficEqualsClosedForm) {
  const auto& [Nq, Nk, d, splits, band] = GetParam();
  Problem problem({.Nq = Nq, .Nk = Nk, .Hq = 4, .Hkv = 2, .d = d, .dv = d}, Band(band), /*seed=*/Nq + Nk);
  ExpectEqual(io_model::RunCountedDecode(problem.params(), splits),
              io_model::Decode(problem.params(), splits).io);
}

INSTANTIATE_TEST_SUITE_P(Grid, IoModelDecodeGridTest,
                         ::testing::Combine(::testing::Values(1, 3, 16), ::testing::Values(1, 5, 100, 1000),
                                            ::testing::Values(1, 16), ::testing::Values(1, 2, 4, 7),
                                            ::testing::Values(0, 1, 2)));

// Batches, MQA, float16/bfloat16 bytes, the head-major layout, no LSE, softcap and ALiBi.
class IoModelDecodeShapeTest : public ::testing::TestWithParam<int> {};

TEST_P(IoModelDecodeShapeTest, CountedTrafficEqualsClosedForm) {
  const int variant = GetParam();
  Shape shape{.batch = 3, .Nq = 2, .Nk = 301, .Hq = 6, .Hkv = 2, .d = 24, .dv = 24};
  Modifiers modifiers{.causal = true};
  if (variant == 1) shape.Hkv = 1, shape.dtype = DType::kF16;
  if (variant == 2) shape.dtype = DType::kBF16, shape.head_major = true;
  if (variant == 4) modifiers = {.window_left = 40, .window_right = 2, .softcap = 3.0f, .alibi = true};
  Problem problem(shape, modifiers, /*seed=*/variant);
  if (variant == 3) problem.params().lse = nullptr;
  ExpectEqual(io_model::RunCountedDecode(problem.params(), 5), io_model::Decode(problem.params(), 5).io);
}

INSTANTIATE_TEST_SUITE_P(Shapes, IoModelDecodeShapeTest, ::testing::Range(0, 5));

TEST(IoModelTest, CountedDecodeLoopComputesAttention) {
  for (std::int64_t splits : {1, 4, 9}) {
    Problem problem({.batch = 2, .Nq = 3, .Nk = 300, .Hq = 4, .Hkv = 2, .d = 32, .dv = 32},
                    {.causal = true, .window_left = 150, .alibi = true}, /*seed=*/6);
    io_model::RunCountedDecode(problem.params(), splits);
    const Errors errors = CompareWithOracle(problem);
    EXPECT_LE(errors.o_error, 1e-5) << "splits=" << splits;
    EXPECT_LE(errors.lse_error, 1e-5) << "splits=" << splits;
  }
}

TEST(IoModelTest, DecodeReadsEachKvHeadOnceForItsQueryGroup) {
  AttentionParams params;
  params.seqlen_q = 1, params.seqlen_k = 4096, params.head_dim = 128;
  params.heads_q = 8, params.heads_kv = 2;
  const io_model::Cost one_split = io_model::Decode(params, 1);
  // Q (8 rows of 128) read, written to the float32 tile and read back by the one chunk; each K/V head's keys
  // and values once (2·4096·2·128); partials of 8·(128 + 1) written, read back by the merge (every row saw a
  // key); O written. No LSE.
  EXPECT_EQ(one_split.io.read, 8 * 128 + 8 * 128 + 2 * 4096 * 2 * 128 + 8 * 129);
  EXPECT_EQ(one_split.io.written, 8 * 128 + 8 * 129 + 8 * 128);
  EXPECT_EQ(one_split.Bc, 4096);
  // Three more chunks: the Q tile and a partial each, written and read.
  const io_model::Cost four_splits = io_model::Decode(params, 4);
  EXPECT_EQ(four_splits.io.read - one_split.io.read, 3 * (8 * 128 + 8 * 129));
  EXPECT_EQ(four_splits.io.written - one_split.io.written, 3 * 8 * 129);
  EXPECT_EQ(four_splits.Bc, 1024);
  EXPECT_EQ(four_splits.flops, one_split.flops);
}

TEST(IoModelTest, DecodeRejectsWhatDecodeLacks) {
  Problem problem({.Nq = 1, .Nk = 8, .d = 16, .dv = 8}, {}, /*seed=*/8);
  EXPECT_THROW(io_model::Decode(problem.params(), 1), Error);
  EXPECT_THROW(io_model::RunCountedDecode(problem.params(), 1), Error);
  Problem masked({.Nq = 1, .Nk = 8, .d = 16, .dv = 16}, {.mask = MaskKind::kBool}, /*seed=*/8);
  EXPECT_THROW(io_model::RunCountedDecode(masked.params(), 1), Error);
  Problem plain({.Nq = 1, .Nk = 8, .d = 16, .dv = 16}, {}, /*seed=*/8);
  EXPECT_THROW(io_model::RunCountedDecode(plain.params(), 0), Error);
  plain.params().dropout_p = 0.5f;
  EXPECT_THROW(io_model::Decode(plain.params(), 1), Error);
}

TEST(IoModelTest, RunCountedRejectsAlgorithmsWithoutInstrumentation) {
  Problem problem({.Nq = 4, .Nk = 4}, {}, /*seed=*/3);
  EXPECT_THROW(io_model::RunCounted(problem.params(), Algorithm::kOracle), Error);
}

}  // namespace
}  // namespace flashattn::testing
