// Block masks and document ids in the forward and backward passes, on every compiled SIMD target: the
// block-sparse call against the same call with the visible elements given densely (a boolean mask tensor
// that holds exactly what the block mask, the band, the documents and the caller's mask let through) — bitwise
// equal, since the kernel keeps its tiles and a tile it skips would have added exact zeros — and both against
// the float64 oracle; create_block_mask against a brute-force classification; every rejected input, with the
// outputs untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backward/backward.h"
#include "backward_test_problem.h"
#include "forward/forward.h"
#include "simd/targets.h"
#include "test_problem.h"
#include "test_targets.h"

namespace flashattn::testing {
namespace {

enum Cls : std::uint8_t { kAbsent = 0, kPartial = 1, kFull = 2 };

// A random block mask: per (batch, head, query block) some query blocks see nothing, the others a mixture
// of partial, full and absent key blocks, listed in a shuffled order. With `key_gap` no query block lists
// the middle third of the key blocks (K/V blocks that no Q block visits, which the forward does not pack).
struct RandomBlockMask {
  std::int64_t batch, heads, Tq, Tk, Qb, Kb;
  std::vector<std::int32_t> num, indices, full_num, full_indices;
  std::vector<std::uint8_t> cls;  // (batch, heads, Tq, Tk)

  RandomBlockMask(std::int64_t batch_, std::int64_t heads_, std::int64_t Nq, std::int64_t Nk, std::int64_t Qb_,
                  std::int64_t Kb_, std::uint64_t seed, bool key_gap = false, double full_share = 0.3)
      : batch(batch_), heads(heads_), Tq((Nq + Qb_ - 1) / Qb_), Tk((Nk + Kb_ - 1) / Kb_), Qb(Qb_), Kb(Kb_) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    const std::int64_t lists = batch * heads * Tq;
    num.assign(lists, 0), full_num.assign(lists, 0);
    indices.assign(std::max<std::int64_t>(1, lists * Tk), -7);  // unused entries hold garbage
    full_indices.assign(std::max<std::int64_t>(1, lists * Tk), -7);
    cls.assign(std::max<std::int64_t>(1, lists * Tk), kAbsent);
    for (std::int64_t list = 0; list < lists; ++list) {
      if (u(rng) < 0.15) continue;  // a query block that sees no key
      std::vector<std::int32_t> partial, full;
      for (std::int32_t c = 0; c < Tk; ++c) {
        const double x = u(rng);
        if (key_gap && c >= Tk / 3 && c < 2 * Tk / 3) continue;
        if (x < 0.35) partial.push_back(c), cls[list * Tk + c] = kPartial;
        else if (x < 0.35 + full_share) full.push_back(c), cls[list * Tk + c] = kFull;
      }
      std::shuffle(partial.begin(), partial.end(), rng);
      std::shuffle(full.begin(), full.end(), rng);
      num[list] = static_cast<std::int32_t>(partial.size());
      full_num[list] = static_cast<std::int32_t>(full.size());
      std::copy(partial.begin(), partial.end(), indices.begin() + list * Tk);
      std::copy(full.begin(), full.end(), full_indices.begin() + list * Tk);
    }
  }
  BlockMask View() const {
    BlockMask m;
    m.block_size_q = Qb, m.block_size_k = Kb, m.heads = heads;
    m.kv_num_blocks = num.data(), m.kv_indices = indices.data(), m.kv_width = Tk;
    m.full_kv_num_blocks = full_num.data(), m.full_kv_indices = full_indices.data(), m.full_kv_width = Tk;
    return m;
  }
  std::uint8_t Class(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return cls[((b * heads + (heads == 1 ? 0 : h)) * Tq + i / Qb) * Tk + j / Kb];
  }
};

// Document ids of `batch` sequences of Nk keys: runs of random lengths (documents), different per sequence.
std::vector<std::int32_t> RandomDocuments(std::int64_t batch, std::int64_t Nk, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> length(1, std::max<std::int64_t>(1, Nk / 3));
  std::vector<std::int32_t> ids(std::max<std::int64_t>(1, batch * Nk));
  for (std::int64_t b = 0; b < batch; ++b) {
    std::int32_t id = static_cast<std::int32_t>(b * 1000);
    for (std::int64_t j = 0; j < Nk;) {
      const std::int64_t end = std::min(Nk, j + length(rng));
      for (; j < end; ++j) ids[b * Nk + j] = id;
      ++id;
    }
  }
  return ids;
}

// What the element predicates of `p` let through at (b, h, i, j): band, documents, boolean mask.
bool PredicatesKeep(const AttentionParams& p, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
  const std::int64_t diagonal = i + p.seqlen_k - p.seqlen_q;
  const std::int64_t right = p.causal ? 0 : p.window_right;
  if (p.window_left >= 0 && j < diagonal - p.window_left) return false;
  if (right >= 0 && j > diagonal + right) return false;
  if (p.document_ids != nullptr && p.document_ids[b * p.seqlen_k + diagonal] != p.document_ids[b * p.seqlen_k + j])
    return false;
  if (p.mask.kind == MaskKind::kBool) {
    const auto* keep = static_cast<const std::uint8_t*>(p.mask.data);
    return keep[b * p.mask.stride_batch + h * p.mask.stride_head + i * p.mask.stride_row + j * p.mask.stride_col];
  }
  return true;
}

// The boolean mask (batch, Hq, Nq, Nk) of the elements the block-sparse call `p` sees.
std::vector<std::uint8_t> DenseVisibility(const AttentionParams& p, const RandomBlockMask* blocks) {
  std::vector<std::uint8_t> keep(std::max<std::int64_t>(1, p.batch * p.heads_q * p.seqlen_q * p.seqlen_k));
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads_q; ++h)
      for (std::int64_t i = 0; i < p.seqlen_q; ++i)
        for (std::int64_t j = 0; j < p.seqlen_k; ++j) {
          const std::uint8_t cls = blocks == nullptr ? kPartial : blocks->Class(b, h, i, j);
          keep[((b * p.heads_q + h) * p.seqlen_q + i) * p.seqlen_k + j] =
              cls == kFull || (cls == kPartial && PredicatesKeep(p, b, h, i, j));
        }
  return keep;
}

// `dense` becomes the call without predicates whose boolean mask is `keep`.
void UseDenseMask(AttentionParams& dense, const std::vector<std::uint8_t>& keep) {
  dense.causal = false, dense.window_left = dense.window_right = -1;
  dense.mask = {MaskKind::kBool, keep.data(), dense.heads_q * dense.seqlen_q * dense.seqlen_k,
                dense.seqlen_q * dense.seqlen_k, dense.seqlen_k, 1};
}

struct Case {
  Shape shape;
  Modifiers modifiers;
  std::int64_t Qb = 64, Kb = 64;
  bool per_head = false;   // the mask's heads: Hq, or 1
  bool block_mask = true;  // false: document ids alone
  bool documents = false;
  bool sinks = false;
  bool key_gap = false;                         // no query block lists the middle third of the key blocks
  std::int64_t block_rows = 0, block_cols = 0;  // the kernel's tiles; 0 = its own
  std::string Label() const {
    return shape.ToString() + "_" + modifiers.ToString() + "_qb" + std::to_string(Qb) + "_kb" + std::to_string(Kb) +
           (per_head ? "_perhead" : "") + (block_mask ? "" : "_nomask") + (documents ? "_docs" : "") +
           (sinks ? "_sinks" : "") + (key_gap ? "_gap" : "") + "_tiles" + std::to_string(block_rows) + "x" + std::to_string(block_cols);
  }
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.Label(); }

// The inputs of one case besides its Problem: block mask, documents, sinks.
struct Sparsity {
  std::unique_ptr<RandomBlockMask> blocks;
  std::vector<std::int32_t> documents;
  std::vector<float> sinks;

  Sparsity(const Case& c, std::uint64_t seed) {
    if (c.block_mask) {
      blocks = std::make_unique<RandomBlockMask>(c.shape.batch, c.per_head ? c.shape.Hq : 1, c.shape.Nq, c.shape.Nk,
                                                 c.Qb, c.Kb, seed, c.key_gap);
    }
    if (c.documents) documents = RandomDocuments(c.shape.batch, c.shape.Nk, seed + 1);
    for (std::int64_t h = 0; h < c.shape.Hq; ++h) sinks.push_back(0.5f * static_cast<float>(h) - 0.25f);
  }
  void Apply(const Case& c, AttentionParams& p) const {
    if (blocks) p.block_mask = blocks->View();
    if (c.documents) p.document_ids = documents.data();
    if (c.sinks) p.sinks = sinks.data();
    p.tiling.block_rows = c.block_rows, p.tiling.block_cols = c.block_cols;
  }
};

// The dense call takes the tiles the kernel chose for the block-sparse one (aligned with its blocks).
void UseTilesOf(const AttentionParams& sparse, AttentionParams& dense) {
  const forward_kernel::FusedTiling tiles = forward_kernel::ChooseFusedTiling(sparse);
  dense.tiling.block_rows = tiles.Br, dense.tiling.block_cols = tiles.Bc;
}
void UseBackwardTilesOf(const AttentionParams& sparse, AttentionParams& dense) {
  const backward_kernel::BackwardBlocks tiles = backward_kernel::ChooseBackwardBlocks(sparse);
  dense.tiling.block_rows = tiles.Br, dense.tiling.block_cols = tiles.Bc;
}

// Forward: block-sparse = dense bitwise on every target, and within the error rule of the oracle.
void ExpectForwardAsDense(const Case& c) {
  const std::uint64_t seed = c.shape.Nq * 31 + c.shape.Nk * 7 + c.shape.d + c.Qb;
  const Sparsity sparsity(c, seed);
  Problem sparse(c.shape, c.modifiers, seed);
  Problem dense(c.shape, c.modifiers, seed);
  sparsity.Apply(c, sparse.params());
  sparsity.Apply(c, dense.params());
  const std::vector<std::uint8_t> keep = DenseVisibility(sparse.params(), sparsity.blocks.get());
  dense.params().block_mask = {}, dense.params().document_ids = nullptr;
  UseTilesOf(sparse.params(), dense.params());
  const bool additive = c.modifiers.mask == MaskKind::kAdditive;
  if (!additive) UseDenseMask(dense.params(), keep);

  forward(dense.params(), Algorithm::kStandard);
  const Errors standard = CompareWithOracle(dense);
  const double slack = c.shape.dtype == DType::kF32 ? 1e-6 : 0.0;
  for (std::int64_t target : TargetsUnderTest()) {
    simd::RestrictTargetForTest(target);
    sparse.ResetOutputs();
    forward(sparse.params(), Algorithm::kFused);
    const Errors errors = CompareWithOracle(sparse);  // the oracle of the block-sparse call itself
    EXPECT_LE(errors.o_error, 2 * standard.o_error + slack) << c.Label() << " on " << simd::TargetName(target);
    EXPECT_LE(errors.lse_error, 2 * standard.lse_error + 1e-6) << c.Label() << " on " << simd::TargetName(target);
    if (additive) continue;  // full blocks drop the additive mask: no boolean mask says the same
    dense.ResetOutputs();
    forward(dense.params(), Algorithm::kFused);
    EXPECT_TRUE(BitwiseEqual(OutputValues(sparse), OutputValues(dense))) << c.Label() << " on "
                                                                          << simd::TargetName(target);
  }
  simd::RestrictTargetForTest(0);
  if (additive) return;
  // The oracle of the block-sparse call is the oracle of its dense equivalent.
  forward(sparse.params(), Algorithm::kOracle);
  forward(dense.params(), Algorithm::kOracle);
  EXPECT_TRUE(BitwiseEqual(OutputValues(sparse), OutputValues(dense))) << c.Label() << " (oracle)";
}

std::vector<Case> ForwardCases() {
  const Shape tails{.Nq = 97, .Nk = 113, .d = 40, .dv = 40};
  std::vector<Case> cases;
  for (const Modifiers& m : {Modifiers{}, Modifiers{.causal = true}, Modifiers{.window_left = 30, .window_right = 5},
                             Modifiers{.softcap = 5.0f, .alibi = true}, Modifiers{.mask = MaskKind::kBool},
                             Modifiers{.mask = MaskKind::kAdditive}}) {
    cases.push_back({.shape = tails, .modifiers = m});
  }
  cases.push_back({.shape = tails, .modifiers = {.causal = true}, .documents = true, .sinks = true});
  cases.push_back({.shape = tails, .modifiers = {.causal = true}, .block_mask = false, .documents = true});
  cases.push_back({.shape = tails, .modifiers = {}, .block_mask = false, .documents = true, .sinks = true});
  cases.push_back({.shape = tails, .modifiers = {}, .Qb = 128, .Kb = 128});
  cases.push_back(
      {.shape = tails, .modifiers = {.causal = true}, .Qb = 13, .Kb = 29, .block_rows = 7, .block_cols = 11});
  cases.push_back({.shape = tails, .modifiers = {}, .Qb = 1, .Kb = 1, .sinks = true});
  cases.push_back(
      {.shape = {.Nq = 113, .Nk = 97, .d = 59, .dv = 59}, .modifiers = {.causal = true}, .Qb = 32, .Kb = 48});
  cases.push_back({.shape = {.Nq = 1, .Nk = 1025, .d = 111, .dv = 111}, .modifiers = {}, .documents = true});
  cases.push_back({.shape = {.Nq = 1025, .Nk = 1025, .d = 64, .dv = 64}, .modifiers = {.causal = true},
                   .Qb = 128, .Kb = 128, .documents = true});
  cases.push_back({.shape = {.batch = 2, .Nq = 97, .Nk = 113, .Hq = 4, .Hkv = 2, .d = 40, .dv = 72},
                   .modifiers = {.causal = true, .softcap = 3.0f, .alibi = true}, .per_head = true, .documents = true,
                   .sinks = true});
  cases.push_back({.shape = {.batch = 2, .Nq = 113, .Nk = 113, .Hq = 3, .Hkv = 1, .d = 256, .dv = 40,
                             .head_major = true},
                   .modifiers = {.window_left = 40, .window_right = 0}, .Qb = 64, .Kb = 128});
  cases.push_back({.shape = {.Nq = 97, .Nk = 113, .d = 576, .dv = 512}, .modifiers = {.causal = true}});
  // K/V blocks that no Q block visits (not packed), GQA; causal blocks cut into tiles, some of which the band
  // leaves out whole.
  cases.push_back({.shape = {.Nq = 113, .Nk = 1025, .Hq = 4, .Hkv = 2, .d = 40, .dv = 40},
                   .modifiers = {.causal = true}, .documents = true, .key_gap = true});
  cases.push_back({.shape = {.Nq = 97, .Nk = 1025, .d = 64, .dv = 64}, .modifiers = {.window_left = 100},
                   .Qb = 128, .Kb = 128, .key_gap = true});
  cases.push_back({.shape = {.Nq = 257, .Nk = 257, .d = 40, .dv = 40}, .modifiers = {.causal = true}, .Qb = 64,
                   .Kb = 64, .block_rows = 24, .block_cols = 32});
  const std::size_t plain = cases.size();
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    for (std::size_t n : {std::size_t{1}, std::size_t{6}, plain - 6}) {
      Case reduced = cases[n];
      reduced.shape.dtype = dtype;
      cases.push_back(reduced);
    }
  }
  return cases;
}

class BlockMaskForwardTest : public ::testing::TestWithParam<Case> {};

TEST_P(BlockMaskForwardTest, BitwiseAsDenseMaskAndWithinErrorRuleOnEveryTarget) { ExpectForwardAsDense(GetParam()); }

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return std::to_string(info.index) + "_" + std::string(to_string(info.param.shape.dtype));
}

INSTANTIATE_TEST_SUITE_P(Matrix, BlockMaskForwardTest, ::testing::ValuesIn(ForwardCases()), CaseName);

// Backward: block-sparse gradients = dense ones bitwise on every target (dropout and sinks included), and the
// dense ones within the error rule of the oracle's backward.
void ExpectBackwardAsDense(const Case& c, Dropout dropout) {
  const std::uint64_t seed = c.shape.Nq * 131 + c.shape.Nk * 7 + c.shape.d;
  const Sparsity sparsity(c, seed);
  BackwardProblem sparse(c.shape, c.modifiers, seed, dropout);
  BackwardProblem dense(c.shape, c.modifiers, seed, dropout);
  sparsity.Apply(c, sparse.forward().params());
  sparsity.Apply(c, dense.forward().params());
  const std::vector<std::uint8_t> keep = DenseVisibility(sparse.forward().params(), sparsity.blocks.get());
  dense.forward().params().block_mask = {}, dense.forward().params().document_ids = nullptr;
  UseDenseMask(dense.forward().params(), keep);
  UseTilesOf(sparse.forward().params(), dense.forward().params());
  sparse.RecomputeForward();
  dense.RecomputeForward();  // O and LSE bitwise those of the block-sparse call
  UseBackwardTilesOf(sparse.params().attention, dense.params().attention);
  std::vector<float> dsinks_sparse(c.shape.Hq), dsinks_dense(c.shape.Hq);
  if (c.sinks) sparse.params().dsinks = dsinks_sparse.data(), dense.params().dsinks = dsinks_dense.data();

  dense.ResetGradients();
  backward(dense.params(), BackwardAlgorithm::kStandard);
  const GradientErrors standard = CompareGradientsWithOracle(dense);
  const bool f32 = c.shape.dtype == DType::kF32;
  const auto bound = [&](double e) { return f32 ? 2 * e + 1e-6 : 3 * e; };
  for (std::int64_t target : TargetsUnderTest()) {
    simd::RestrictTargetForTest(target);
    sparse.ResetGradients();
    dense.ResetGradients();
    backward(sparse.params(), BackwardAlgorithm::kFused);
    backward(dense.params(), BackwardAlgorithm::kFused);
    EXPECT_TRUE(sparse.GradientBits() == dense.GradientBits()) << c.Label() << " on " << simd::TargetName(target);
    EXPECT_TRUE(std::memcmp(dsinks_sparse.data(), dsinks_dense.data(), 4 * dsinks_dense.size()) == 0) << c.Label();
    const GradientErrors errors = CompareGradientsWithOracle(sparse);  // the block-sparse oracle's backward
    EXPECT_LE(errors.dq, bound(standard.dq)) << c.Label() << " on " << simd::TargetName(target);
    EXPECT_LE(errors.dk, bound(standard.dk)) << c.Label() << " on " << simd::TargetName(target);
    EXPECT_LE(errors.dv, bound(standard.dv)) << c.Label() << " on " << simd::TargetName(target);
  }
  simd::RestrictTargetForTest(0);
}

std::vector<Case> BackwardCases() {
  const Shape tails{.Nq = 97, .Nk = 113, .d = 40, .dv = 40};
  std::vector<Case> cases = {
      {.shape = tails, .modifiers = {}},
      {.shape = tails, .modifiers = {.causal = true}, .documents = true},
      {.shape = tails, .modifiers = {.window_left = 30, .window_right = 5, .softcap = 5.0f, .alibi = true}},
      {.shape = tails, .modifiers = {.mask = MaskKind::kBool}, .Qb = 32, .Kb = 48, .sinks = true},
      {.shape = tails, .modifiers = {.causal = true}, .block_mask = false, .documents = true},
      {.shape = tails, .modifiers = {}, .Qb = 13, .Kb = 29, .block_rows = 7, .block_cols = 11},
      {.shape = {.Nq = 1, .Nk = 97, .d = 59, .dv = 59}, .modifiers = {}, .documents = true},
      {.shape = {.Nq = 1025, .Nk = 1025, .d = 8, .dv = 8}, .modifiers = {.causal = true}, .Qb = 128, .Kb = 128,
       .documents = true},
      {.shape = {.batch = 2, .Nq = 97, .Nk = 113, .Hq = 4, .Hkv = 2, .d = 40, .dv = 72},
       .modifiers = {.causal = true}, .per_head = true, .documents = true, .sinks = true},
      // K/V blocks that no Q block visits; causal blocks cut into tiles, some of which the band leaves out
      {.shape = {.Nq = 113, .Nk = 1025, .Hq = 4, .Hkv = 2, .d = 40, .dv = 40}, .modifiers = {.causal = true},
       .documents = true, .key_gap = true},
      {.shape = {.Nq = 257, .Nk = 257, .d = 40, .dv = 40}, .modifiers = {.causal = true}, .Qb = 64, .Kb = 64,
       .block_rows = 32, .block_cols = 32},
  };
  const std::size_t plain = cases.size();
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    for (std::size_t n : {std::size_t{1}, plain - 3}) {
      Case reduced = cases[n];
      reduced.shape.dtype = dtype;
      cases.push_back(reduced);
    }
  }
  return cases;
}

class BlockMaskBackwardTest : public ::testing::TestWithParam<Case> {};

TEST_P(BlockMaskBackwardTest, BitwiseAsDenseMaskAndWithinErrorRuleOnEveryTarget) {
  ExpectBackwardAsDense(GetParam(), {});
}

INSTANTIATE_TEST_SUITE_P(Matrix, BlockMaskBackwardTest, ::testing::ValuesIn(BackwardCases()), CaseName);

TEST(BlockMaskBackward, DropoutBitwiseAsDenseMask) {
  ExpectBackwardAsDense({.shape = {.Nq = 97, .Nk = 113, .d = 40, .dv = 40}, .modifiers = {.causal = true},
                         .documents = true},
                        {.p = 0.2f, .seed = 7, .offset = 3});
}

// A NaN or inf in K or V of keys that the block mask hides (an absent block, or masked by a partial block's
// predicates) takes no part, forward and backward, on every target: the results are finite and those of the
// dense boolean-mask call.
TEST(BlockMaskBackward, NonFiniteHiddenKeysTakeNoPart) {
  const Case c{.shape = {.Nq = 40, .Nk = 48, .d = 16, .dv = 16}, .modifiers = {.causal = true}, .Qb = 16, .Kb = 16,
               .block_rows = 8, .block_cols = 24};
  // Every query block sees key block 0 whole and key block 1 as partial (causal); key block 2 is absent.
  std::vector<std::int32_t> num(3, 1), indices(9, 1), full_num(3, 1), full_indices(9, 0);
  BlockMask mask{.block_size_q = 16, .block_size_k = 16, .heads = 1, .kv_num_blocks = num.data(),
                 .kv_indices = indices.data(), .kv_width = 3, .full_kv_num_blocks = full_num.data(),
                 .full_kv_indices = full_indices.data(), .full_kv_width = 3};
  BackwardProblem sparse(c.shape, c.modifiers, 9), dense(c.shape, c.modifiers, 9);
  for (BackwardProblem* x : {&sparse, &dense}) {
    for (std::int64_t e = 0; e < 16; ++e) {
      x->forward().SetV(0, 40, 0, e, std::numeric_limits<float>::quiet_NaN());  // absent block 2
      x->forward().SetK(0, 47, 0, e, std::numeric_limits<float>::infinity());
      x->forward().SetV(0, 31, 0, e, std::numeric_limits<float>::infinity());  // partial block 1, causal hides it
    }                                                                            // from rows 0..22
  }
  sparse.forward().params().block_mask = mask;
  sparse.forward().params().tiling = {0, c.block_rows, c.block_cols};
  const std::vector<std::uint8_t> keep = [&] {
    std::vector<std::uint8_t> k(40 * 48, 0);
    for (std::int64_t i = 0; i < 40; ++i)
      for (std::int64_t j = 0; j < 32; ++j) k[i * 48 + j] = j < 16 || j <= i + 8;
    return k;
  }();
  UseDenseMask(dense.forward().params(), keep);
  dense.forward().params().tiling = {0, c.block_rows, c.block_cols};
  for (std::int64_t target : TargetsUnderTest()) {
    simd::RestrictTargetForTest(target);
    sparse.RecomputeForward();
    dense.RecomputeForward();
    const std::vector<float> out = OutputValues(sparse.forward());
    EXPECT_TRUE(BitwiseEqual(out, OutputValues(dense.forward()))) << simd::TargetName(target);
    for (std::int64_t i = 0; i < 40; ++i) {  // rows 23.. see key 31, whose V is inf
      EXPECT_EQ(std::isfinite(sparse.forward().O(0, i, 0, 0)), i < 23) << i << " " << simd::TargetName(target);
    }
    sparse.ResetGradients();
    dense.ResetGradients();
    backward(sparse.params());
    backward(dense.params());
    EXPECT_TRUE(sparse.GradientBits() == dense.GradientBits()) << simd::TargetName(target);
    EXPECT_TRUE(std::isfinite(sparse.dQ(0, 0, 0, 0)) && std::isfinite(sparse.dV(0, 40, 0, 0)));
    EXPECT_EQ(sparse.dV(0, 40, 0, 0), 0.0f) << "an absent key's gradient";
  }
  simd::RestrictTargetForTest(0);
}

// The oracle's gradients of a tiny block-sparse problem against central differences of its oracle forward:
// L = Σ dO ∘ O, dL/dx ≈ (L(x + ε) − L(x − ε)) / 2ε in float64 terms of a float32 problem.
TEST(BlockMaskBackward, OracleGradientsMatchFiniteDifferences) {
  const Case c{.shape = {.Nq = 9, .Nk = 11, .d = 4, .dv = 3}, .modifiers = {.causal = true}, .Qb = 4, .Kb = 3,
               .documents = true};
  const Sparsity sparsity(c, 5);
  BackwardProblem x(c.shape, c.modifiers, 5, {}, Algorithm::kOracle);
  sparsity.Apply(c, x.forward().params());
  x.RecomputeForward(Algorithm::kOracle);
  x.ResetGradients();
  backward(x.params(), BackwardAlgorithm::kOracle);
  // L from the oracle's O; dO is read back from the backward problem's inputs.
  std::vector<float> d_o(c.shape.Nq * c.shape.dv);
  const auto* d_o_raw = static_cast<const float*>(x.params().d_o);
  std::copy(d_o_raw, d_o_raw + d_o.size(), d_o.begin());
  const auto loss = [&]() {
    forward(x.forward().params(), Algorithm::kOracle);
    double sum = 0.0;
    for (std::int64_t i = 0; i < c.shape.Nq; ++i)
      for (std::int64_t e = 0; e < c.shape.dv; ++e) sum += double{d_o[i * c.shape.dv + e]} * x.forward().O(0, i, 0, e);
    return sum;
  };
  const float eps = 1e-2f;
  auto* q = static_cast<float*>(const_cast<void*>(x.forward().params().q));
  auto* k = static_cast<float*>(const_cast<void*>(x.forward().params().k));
  for (auto [data, n, grad] : {std::tuple{q, std::int64_t{0}, 'q'}, std::tuple{q, std::int64_t{17}, 'q'},
                               std::tuple{k, std::int64_t{5}, 'k'}, std::tuple{k, std::int64_t{30}, 'k'}}) {
    const float original = data[n];
    data[n] = original + eps;
    const double up = loss();
    data[n] = original - eps;
    const double down = loss();
    data[n] = original;
    const double numeric = (up - down) / (2 * eps);
    const std::int64_t row = n / c.shape.d, e = n % c.shape.d;
    const double analytic = grad == 'q' ? x.dQ(0, row, 0, e) : x.dK(0, row, 0, e);
    EXPECT_NEAR(analytic, numeric, 2e-3 * std::max(1.0, std::fabs(numeric))) << grad << n;
  }
}

// ---- create_block_mask ------------------------------------------------------------------------------------

void ExpectCreateBlockMaskClassifies(std::int64_t batch, std::int64_t Nq, std::int64_t Nk, std::int64_t Qb,
                                     std::int64_t Kb, bool causal, std::int64_t left, std::int64_t right,
                                     bool documents) {
  const std::vector<std::int32_t> ids = RandomDocuments(batch, Nk, Nq + Nk);
  const BlockMaskLists lists =
      create_block_mask(batch, Nq, Nk, Qb, Kb, causal, left, right, documents ? ids.data() : nullptr, 0);
  AttentionParams p;
  p.batch = batch, p.seqlen_q = Nq, p.seqlen_k = Nk, p.causal = causal, p.window_left = left, p.window_right = right;
  p.document_ids = documents ? ids.data() : nullptr;
  const std::int64_t Tq = (Nq + Qb - 1) / Qb, Tk = (Nk + Kb - 1) / Kb;
  ASSERT_EQ(lists.query_blocks, Tq);
  ASSERT_EQ(lists.key_blocks, Tk);
  const BlockMask m = lists.view();
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t r = 0; r < Tq; ++r) {
      std::vector<std::uint8_t> expected(Tk, kAbsent), actual(Tk, kAbsent);
      for (std::int64_t c = 0; c < Tk; ++c) {
        std::int64_t seen = 0, all = 0;
        for (std::int64_t i = r * Qb; i < std::min(Nq, (r + 1) * Qb); ++i)
          for (std::int64_t j = c * Kb; j < std::min(Nk, (c + 1) * Kb); ++j)
            seen += PredicatesKeep(p, b, 0, i, j), ++all;
        expected[c] = seen == 0 ? kAbsent : seen == all ? kFull : kPartial;
      }
      const std::int64_t list = b * Tq + r;
      for (const auto& [num, indices, cls] : {std::tuple{m.kv_num_blocks, m.kv_indices, kPartial},
                                              std::tuple{m.full_kv_num_blocks, m.full_kv_indices, kFull}}) {
        for (std::int32_t e = 0; e < num[list]; ++e) {
          actual[indices[list * Tk + e]] = cls;
          if (e > 0) EXPECT_LT(indices[list * Tk + e - 1], indices[list * Tk + e]) << "sorted ascending";
        }
      }
      EXPECT_EQ(actual, expected) << "b" << b << " r" << r << " Nq" << Nq << " Nk" << Nk << " Qb" << Qb << " Kb" << Kb
                                  << " causal" << causal << " window " << left << "," << right << " docs" << documents;
    }
  }
}

TEST(CreateBlockMask, ClassifiesAsBruteForce) {
  for (auto [Nq, Nk] : {std::pair{97, 113}, std::pair{113, 113}, std::pair{1, 1025}, std::pair{1025, 1025}}) {
    for (auto [Qb, Kb] : {std::pair{64, 64}, std::pair{128, 128}, std::pair{32, 48}}) {
      if (Nq == 1025 && Qb != 128) continue;  // the brute force is Nq·Nk per case
      ExpectCreateBlockMaskClassifies(2, Nq, Nk, Qb, Kb, true, -1, -1, true);
      ExpectCreateBlockMaskClassifies(1, Nq, Nk, Qb, Kb, true, -1, -1, false);
      ExpectCreateBlockMaskClassifies(1, Nq, Nk, Qb, Kb, false, 40, 7, false);
      ExpectCreateBlockMaskClassifies(1, Nq, Nk, Qb, Kb, false, -1, -1, true);
      ExpectCreateBlockMaskClassifies(1, Nq, Nk, Qb, Kb, false, 100, 0, true);
    }
  }
  ExpectCreateBlockMaskClassifies(1, 113, 97, 32, 48, true, -1, -1, false);  // Nq > Nk: some rows see nothing
  ExpectCreateBlockMaskClassifies(1, 0, 97, 32, 48, true, -1, -1, false);
}

TEST(CreateBlockMask, DocumentMaskGivesTheDenseDocumentCall) {
  const Case c{.shape = {.Nq = 113, .Nk = 113, .d = 40, .dv = 40}, .modifiers = {.causal = true}, .block_mask = false,
               .documents = true};
  const Sparsity sparsity(c, 3);
  Problem dense(c.shape, c.modifiers, 3), sparse(c.shape, c.modifiers, 3);
  sparsity.Apply(c, dense.params());
  sparsity.Apply(c, sparse.params());
  const BlockMaskLists lists = create_block_mask(1, 113, 113, 32, 32, true, -1, -1, sparsity.documents.data(), 0);
  sparse.params().block_mask = lists.view();
  UseTilesOf(sparse.params(), dense.params());
  forward(dense.params());
  forward(sparse.params());
  EXPECT_TRUE(BitwiseEqual(OutputValues(sparse), OutputValues(dense)));
}

TEST(CreateBlockMask, BlockAlignedTilesDoNotStraddleBlocks) {
  EXPECT_EQ(BlockAlignedTile(696, 128), 128);  // a block within the rule: one tile
  EXPECT_EQ(BlockAlignedTile(696, 13), 39);    // small blocks: whole blocks up to 32 rows
  EXPECT_EQ(BlockAlignedTile(696, 1), 32);
  EXPECT_EQ(BlockAlignedTile(128, 512), 128);  // a larger block: its largest divisor up to the rule
  EXPECT_EQ(BlockAlignedTile(120, 1000), 100);
  EXPECT_EQ(BlockAlignedTile(128, 1031), 128);  // a prime: the rule's tiles
}

TEST(CreateBlockMask, RejectsBadArguments) {
  const std::vector<std::int32_t> ids(200, 0);
  EXPECT_THROW(create_block_mask(1, 10, 10, 0, 8, false, -1, -1, nullptr, 0), Error);
  EXPECT_THROW(create_block_mask(1, 10, 10, 8, -1, false, -1, -1, nullptr, 0), Error);
  EXPECT_THROW(create_block_mask(-1, 10, 10, 8, 8, false, -1, -1, nullptr, 0), Error);
  EXPECT_THROW(create_block_mask(1, 10, 10, 8, 8, false, -2, -1, nullptr, 0), Error);
  EXPECT_THROW(create_block_mask(1, 20, 10, 8, 8, false, -1, -1, ids.data(), 0), Error);
  EXPECT_THROW(create_block_mask(2, 10, 10, 8, 8, false, -1, -1, ids.data(), 5), Error);
}

// ---- Rejected inputs --------------------------------------------------------------------------------------

// Each bad block mask or document ids: forward and backward throw an Error naming it; nothing is written.
class BlockMaskValidationTest : public ::testing::Test {
 protected:
  static constexpr std::int64_t kNq = 40, kNk = 50, kQb = 16, kKb = 16, kTq = 3, kTk = 4;
  BlockMaskValidationTest() : x_({.Nq = kNq, .Nk = kNk, .Hq = 2, .Hkv = 1, .d = 8, .dv = 8}, {}, 1) {
    num_.assign(2 * kTq, 1), indices_.assign(2 * kTq * kTk, 0);
    full_num_.assign(2 * kTq, 1), full_indices_.assign(2 * kTq * kTk, 1);
    ids_.assign(kNk, 0);
    BlockMask& m = Params().block_mask;
    m.block_size_q = kQb, m.block_size_k = kKb, m.heads = 2;
    m.kv_num_blocks = num_.data(), m.kv_indices = indices_.data(), m.kv_width = kTk;
    m.full_kv_num_blocks = full_num_.data(), m.full_kv_indices = full_indices_.data(), m.full_kv_width = kTk;
    Params().document_ids = ids_.data();
  }
  AttentionParams& Params() { return x_.forward().params(); }
  // Forward and backward both reject the current params with a message holding `needle`, writing nothing.
  void ExpectRejected(const std::string& needle) {
    x_.forward().ResetOutputs();
    x_.ResetGradients();
    const std::vector<float> before = OutputValues(x_.forward());
    const std::vector<std::uint16_t> gradients = x_.GradientBits();
    try {
      forward(Params());
      ADD_FAILURE() << "forward accepted a call that should fail with " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_TRUE(BitwiseEqual(OutputValues(x_.forward()), before)) << needle;
    BackwardParams bp = x_.params();
    bp.attention = Params();
    bp.attention.o = x_.params().attention.o, bp.attention.lse = x_.params().attention.lse;
    try {
      backward(bp);
      ADD_FAILURE() << "backward accepted a call that should fail with " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_TRUE(x_.GradientBits() == gradients) << needle;
  }

  BackwardProblem x_;
  std::vector<std::int32_t> num_, indices_, full_num_, full_indices_, ids_;
};

TEST_F(BlockMaskValidationTest, AcceptsTheValidCall) {
  EXPECT_NO_THROW(forward(Params()));
  Params().block_mask.heads = 1;
  EXPECT_NO_THROW(forward(Params()));
}

TEST_F(BlockMaskValidationTest, RejectsIndicesOutOfRange) {
  indices_[kTk] = kTk;
  ExpectRejected("block_mask.kv_indices[0, 0, 1, 0] must be a key block in [0, 4)");
  indices_[kTk] = 0;
  full_indices_[2 * kTk] = -1;
  ExpectRejected("block_mask.full_kv_indices[0, 0, 2, 0] must be a key block in [0, 4)");
}

TEST_F(BlockMaskValidationTest, RejectsCountsOutsideTheWidth) {
  num_[1] = -1;
  ExpectRejected("block_mask.kv_num_blocks[0, 0, 1] must be in [0, 4]");
  num_[1] = kTk + 1;
  ExpectRejected("block_mask.kv_num_blocks[0, 0, 1] must be in [0, 4]");
  num_[1] = 1;
  full_num_[4] = 5;
  ExpectRejected("block_mask.full_kv_num_blocks[0, 1, 1] must be in [0, 4]");
}

TEST_F(BlockMaskValidationTest, RejectsABlockListedTwice) {
  num_[0] = 2, indices_[1] = 0;
  ExpectRejected("key block 0 is listed twice for query block 0");
  num_[0] = 1, full_indices_[0] = 0;  // in the partial and in the full list
  ExpectRejected("key block 0 is listed twice for query block 0");
}

TEST_F(BlockMaskValidationTest, RejectsHeadsNotOneOrHq) {
  Params().block_mask.heads = 3;
  ExpectRejected("block_mask.heads must be 1 or heads_q=2, got 3");
}

TEST_F(BlockMaskValidationTest, RejectsBlockSizes) {
  Params().block_mask.block_size_q = 0;
  ExpectRejected("block_mask.block_size_q must be in [1, ");
  Params().block_mask.block_size_q = kQb, Params().block_mask.block_size_k = -4;
  ExpectRejected("block_mask.block_size_k must be in [1, ");
}

TEST_F(BlockMaskValidationTest, RejectsMissingLists) {
  Params().block_mask.kv_indices = nullptr;
  ExpectRejected("block_mask.kv_indices");
  Params().block_mask.kv_indices = indices_.data(), Params().block_mask.full_kv_indices = nullptr;
  ExpectRejected("block_mask.full_kv_num_blocks and block_mask.full_kv_indices must be both set");
  Params().block_mask.kv_num_blocks = nullptr;
  ExpectRejected("block_mask has lists but block_mask.kv_num_blocks is null");
}

TEST_F(BlockMaskValidationTest, RejectsDocumentIdsWithMoreQueriesThanKeys) {
  Params().block_mask = {};
  Params().seqlen_k = kNq - 1;
  ExpectRejected("document_ids need seqlen_q <= seqlen_k");
  Params().seqlen_k = kNk, Params().document_ids_batch_stride = 3;
  ExpectRejected("document_ids_batch_stride must be 0 (contiguous) or >= seqlen_k=50, got 3");
}

TEST_F(BlockMaskValidationTest, RejectsABlockPosition) {
  Params().block_position.query_start = 0, Params().block_position.total_seqlen_q = kNq + 8;
  ExpectRejected("document_ids need the default block_position");
  Params().document_ids = nullptr;
  ExpectRejected("block_mask needs the default block_position");
}

}  // namespace
}  // namespace flashattn::testing
