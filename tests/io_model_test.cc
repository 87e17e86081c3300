// The closed forms of src/io_model/ against the instrumented reference run: over a grid of shapes, fast
// memory sizes and masks (tails included), the counted traffic equals the model exactly, in elements and in
// bytes. Also the seed's 4Nd + 4N² for standard, and the tile-skipping model against a brute-force count.
#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>
#include <vector>

#include "io_model/io_model.h"
#include "reference/problem.h"
#include "reference/reference.h"
#include "test_problem.h"

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

TEST(IoModelTest, StandardIsTheSeedsFourNdPlusFourNSquared) {
  for (std::int64_t N : {1, 64, 1000, 4096})
    for (std::int64_t d : {16, 64, 128}) {
      AttentionParams params;
      params.seqlen_q = params.seqlen_k = N;
      params.head_dim = d;
      const io_model::Cost cost = io_model::Standard(params);  // no LSE requested, as in the seed
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

TEST(IoModelTest, DecodeReadsEachKvHeadOnceForItsQueryGroup) {
  AttentionParams params;
  params.seqlen_q = 1, params.seqlen_k = 4096, params.head_dim = 128;
  params.heads_q = 8, params.heads_kv = 2;
  const io_model::Cost one_split = io_model::Decode(params, 1);
  // Per K/V head: K, V once (2·4096·128) and the 4 query rows; partials of 4·(128 + 1) written and read.
  EXPECT_EQ(one_split.io.read, 2 * (2 * 4096 * 128 + 4 * 128 + 4 * 129));
  EXPECT_EQ(one_split.io.written, 2 * (4 * 129 + 4 * 128));
  const io_model::Cost four_splits = io_model::Decode(params, 4);
  EXPECT_EQ(four_splits.io.read - one_split.io.read, 2 * 3 * (4 * 128 + 4 * 129));
}

TEST(IoModelTest, RunCountedRejectsAlgorithmsWithoutInstrumentation) {
  Problem problem({.Nq = 4, .Nk = 4}, {}, /*seed=*/3);
  EXPECT_THROW(io_model::RunCounted(problem.params(), Algorithm::kOracle), Error);
}

}  // namespace
}  // namespace flashattn::testing
