// A call that is one block of a larger problem (AttentionSettings::block_position, DecodeParams::keys_after):
// the blocks of a problem, computed separately and merged by LSE (forward, decode) or summed (backward),
// equal the whole problem's call, with the band, ALiBi and dropout at the problem's positions; the dropout
// decisions of a block are exactly the whole problem's; bad positions are rejected before anything is
// written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "flashattn/flashattn.h"

namespace flashattn::testing {
namespace {

using Floats = std::vector<float>;

Floats Random(std::int64_t n, std::mt19937& random) {
  std::normal_distribution<float> normal;
  Floats values(static_cast<std::size_t>(n));
  for (float& x : values) x = normal(random);
  return values;
}

// Rows [begin, begin + count) of a contiguous (batch, rows, heads, dim) tensor, as their own contiguous
// tensor.
Floats Rows(const Floats& from, std::int64_t batch, std::int64_t rows, std::int64_t row_elements, std::int64_t begin,
            std::int64_t count) {
  Floats out;
  for (std::int64_t b = 0; b < batch; ++b) {
    const auto first = from.begin() + (b * rows + begin) * row_elements;
    out.insert(out.end(), first, first + count * row_elements);
  }
  return out;
}

// Adds a contiguous (batch, count, ...) tensor into rows [begin, begin + count) of a (batch, rows, ...) one.
void AddRows(const Floats& from, std::int64_t batch, std::int64_t rows, std::int64_t row_elements, std::int64_t begin,
             std::int64_t count, Floats& into) {
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t e = 0; e < count * row_elements; ++e)
      into[static_cast<std::size_t>((b * rows + begin) * row_elements + e)] +=
          from[static_cast<std::size_t>(b * count * row_elements + e)];
}

// max |got − want| / max(1, max |want|), over finite values; a −inf must match exactly.
double RelativeError(const Floats& got, const Floats& want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0.0, norm = 1.0;
  for (std::size_t n = 0; n < want.size(); ++n) {
    if (std::isinf(want[n])) {
      EXPECT_EQ(got[n], want[n]) << "at " << n;
      continue;
    }
    diff = std::max(diff, static_cast<double>(std::fabs(got[n] - want[n])));
    norm = std::max(norm, static_cast<double>(std::fabs(want[n])));
  }
  return diff / norm;
}

struct Modifiers {
  std::string name;
  bool causal = false;
  std::int64_t window_left = -1, window_right = -1;
  bool alibi = false;
  float softcap = 0.0f;
  float dropout_p = 0.0f;
};

std::vector<Modifiers> ModifierCases() {
  return {{"none"},
          {"causal", true},
          {"window", false, 17, 5},
          {"alibi", false, -1, -1, true},
          {"causal+alibi", true, -1, -1, true},
          {"window+alibi+softcap", false, 9, 30, true, 5.0f},
          {"dropout", false, -1, -1, false, 0.0f, 0.3f},
          {"causal+window+alibi+dropout", true, 40, -1, true, 0.0f, 0.2f}};
}

// A problem of batch × Nq queries against Nk keys, float32 contiguous (batch, seq, head, dim), and its
// whole call.
struct Problem {
  std::int64_t batch = 2, Nq = 0, Nk = 0, Hq = 4, Hkv = 2, d = 0, dv = 0;
  Floats q, k, v, slopes;

  Problem(std::int64_t Nq_, std::int64_t Nk_, std::int64_t d_, std::uint32_t seed) : Nq(Nq_), Nk(Nk_), d(d_), dv(d_) {
    std::mt19937 random(seed);
    q = Random(batch * Nq * Hq * d, random);
    k = Random(batch * Nk * Hkv * d, random);
    v = Random(batch * Nk * Hkv * dv, random);
    for (std::int64_t n = 0; n < batch * Hq; ++n) slopes.push_back(0.05f * static_cast<float>(n % Hq + 1));
  }

  // The whole problem's call; o and lse left for the caller.
  AttentionParams Whole(const Modifiers& m) const {
    AttentionParams p;
    p.q = q.data(), p.k = k.data(), p.v = v.data();
    p.batch = batch, p.seqlen_q = Nq, p.seqlen_k = Nk, p.heads_q = Hq, p.heads_kv = Hkv, p.head_dim = d;
    p.causal = m.causal, p.window_left = m.window_left, p.window_right = m.window_right;
    p.softcap = m.softcap;
    if (m.alibi) p.alibi_slopes = slopes.data(), p.alibi_batch_stride = Hq;
    p.dropout_p = m.dropout_p, p.dropout_seed = 77, p.dropout_offset = 5;
    p.set_contiguous_strides();
    return p;
  }

  // Rows [i0, i0 + n) against keys [j0, j0 + m) of the whole call, placed in it; its o (batch, n, Hq, dv)
  // contiguous.
  AttentionParams Block(const Modifiers& mods, std::int64_t i0, std::int64_t n, std::int64_t j0, std::int64_t m) const {
    AttentionParams p = Whole(mods);
    p.q = q.data() + i0 * Hq * d;
    p.k = k.data() + j0 * Hkv * d;
    p.v = v.data() + j0 * Hkv * dv;
    p.seqlen_q = n, p.seqlen_k = m;
    p.o_strides = {n * Hq * dv, Hq * dv, dv};
    p.block_position = {i0, j0, Nq, Nk};
    return p;
  }
};

struct Output {
  Floats o, lse;
};

Output Forward(AttentionParams p) {
  Output out{Floats(static_cast<std::size_t>(p.batch * p.seqlen_q * p.heads_q * p.value_head_dim())),
             Floats(static_cast<std::size_t>(p.batch * p.heads_q * p.seqlen_q))};
  p.o = out.o.data(), p.lse = out.lse.data();
  forward(p);
  return out;
}

// Partials over the same rows merged by LSE.
Output Merge(const std::vector<Output>& partials, std::int64_t batch, std::int64_t rows, std::int64_t heads,
             std::int64_t dv) {
  Floats o_partials, lse_partials;
  for (const Output& partial : partials) {
    o_partials.insert(o_partials.end(), partial.o.begin(), partial.o.end());
    lse_partials.insert(lse_partials.end(), partial.lse.begin(), partial.lse.end());
  }
  Output merged{Floats(partials[0].o.size()), Floats(partials[0].lse.size())};
  MergeParams merge;
  merge.o_partials = o_partials.data(), merge.lse_partials = lse_partials.data();
  merge.o = merged.o.data(), merge.lse = merged.lse.data();
  merge.num_partials = static_cast<std::int64_t>(partials.size());
  merge.batch = batch, merge.seqlen = rows, merge.heads = heads, merge.head_dim_v = dv;
  merge.set_contiguous_strides();
  merge_attention_states(merge);
  return merged;
}

std::vector<std::uint8_t> DropoutMask(AttentionParams p) {
  Floats o(static_cast<std::size_t>(p.batch * p.seqlen_q * p.heads_q * p.value_head_dim()));  // checked, not written
  p.o = o.data();
  std::vector<std::uint8_t> keep(static_cast<std::size_t>(p.batch * p.heads_q * p.seqlen_q * p.seqlen_k));
  materialize_dropout_mask(p, keep.data());
  return keep;
}

// Query rows split at row_split, keys at key_split (neither a multiple of 4).
struct Split {
  std::int64_t Nq, Nk, d, row_split, key_split;
};
const Split kSplits[] = {{113, 97, 40, 50, 33}, {97, 97, 59, 1, 45}, {1, 113, 111, 0, 57}, {64, 1025, 16, 31, 511}};

// The row ranges and key ranges of a split: [0, split) and [split, N), the empty ones left out.
std::vector<std::pair<std::int64_t, std::int64_t>> Ranges(std::int64_t split, std::int64_t n) {
  std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
  if (split > 0) ranges.push_back({0, split});
  if (split < n) ranges.push_back({split, n - split});
  return ranges;
}

TEST(BlockPositionTest, BlocksMergedByLseEqualTheWholeForwardCall) {
  for (const Split& split : kSplits)
    for (const Modifiers& mods : ModifierCases()) {
      SCOPED_TRACE(mods.name + " Nq=" + std::to_string(split.Nq) + " Nk=" + std::to_string(split.Nk));
      const Problem problem(split.Nq, split.Nk, split.d, 11);
      const Output whole = Forward(problem.Whole(mods));
      const std::int64_t B = problem.batch, Hq = problem.Hq, dv = problem.dv;
      for (const auto& [i0, n] : Ranges(split.row_split, split.Nq)) {
        std::vector<Output> partials;
        for (const auto& [j0, m] : Ranges(split.key_split, split.Nk))
          partials.push_back(Forward(problem.Block(mods, i0, n, j0, m)));
        const Output merged = Merge(partials, B, n, Hq, dv);
        EXPECT_LT(RelativeError(merged.o, Rows(whole.o, B, split.Nq, Hq * dv, i0, n)), 2e-5) << "rows " << i0 << "+" << n;
        Floats whole_lse;  // (batch, Hq, n) of the whole call's (batch, Hq, Nq)
        for (std::int64_t bh = 0; bh < B * Hq; ++bh)
          whole_lse.insert(whole_lse.end(), whole.lse.begin() + bh * split.Nq + i0,
                           whole.lse.begin() + bh * split.Nq + i0 + n);
        EXPECT_LT(RelativeError(merged.lse, whole_lse), 2e-6) << "rows " << i0 << "+" << n;
      }
    }
}

TEST(BlockPositionTest, BlockDropoutDecisionsAreTheWholeProblemsExactly) {
  const Problem problem(113, 97, 8, 3);
  Modifiers mods;
  mods.dropout_p = 0.4f;
  const std::vector<std::uint8_t> whole = DropoutMask(problem.Whole(mods));
  for (const auto& [i0, n] : {std::pair<std::int64_t, std::int64_t>{0, 113}, {7, 50}, {112, 1}})
    for (const auto& [j0, m] : {std::pair<std::int64_t, std::int64_t>{0, 97}, {1, 33}, {33, 64}, {35, 2}, {96, 1}}) {
      const std::vector<std::uint8_t> block = DropoutMask(problem.Block(mods, i0, n, j0, m));
      std::int64_t differ = 0;
      for (std::int64_t bh = 0; bh < problem.batch * problem.Hq; ++bh)
        for (std::int64_t i = 0; i < n; ++i)
          for (std::int64_t j = 0; j < m; ++j)
            differ += block[static_cast<std::size_t>((bh * n + i) * m + j)] !=
                      whole[static_cast<std::size_t>((bh * problem.Nq + i0 + i) * problem.Nk + j0 + j)];
      EXPECT_EQ(differ, 0) << "rows " << i0 << "+" << n << " keys " << j0 << "+" << m;
    }
}

TEST(BlockPositionTest, DefaultPositionAndTheExplicitWholeProblemGiveIdenticalResults) {
  const Problem problem(97, 113, 40, 5);
  const Modifiers mods = ModifierCases().back();
  const Output implicit = Forward(problem.Whole(mods));
  const Output explicit_whole = Forward(problem.Block(mods, 0, problem.Nq, 0, problem.Nk));
  EXPECT_EQ(implicit.o, explicit_whole.o);
  EXPECT_EQ(implicit.lse, explicit_whole.lse);
}

// dQ, dK, dV of the blocks, each differentiated with the whole call's O and LSE, summed over blocks.
struct Gradients {
  Floats dq, dk, dv;
};

Gradients Backward(AttentionParams attention, const Floats& d_o) {
  const std::int64_t B = attention.batch, d = attention.head_dim, dv = attention.value_head_dim();
  Gradients g{Floats(static_cast<std::size_t>(B * attention.seqlen_q * attention.heads_q * d)),
              Floats(static_cast<std::size_t>(B * attention.seqlen_k * attention.heads_kv * d)),
              Floats(static_cast<std::size_t>(B * attention.seqlen_k * attention.heads_kv * dv))};
  BackwardParams p;
  p.attention = attention;
  p.d_o = d_o.data();
  p.dq = g.dq.data(), p.dk = g.dk.data(), p.dv = g.dv.data();
  p.do_strides = attention.o_strides;
  p.dq_strides = {attention.seqlen_q * attention.heads_q * d, attention.heads_q * d, d};
  p.dk_strides = {attention.seqlen_k * attention.heads_kv * d, attention.heads_kv * d, d};
  p.dv_strides = {attention.seqlen_k * attention.heads_kv * dv, attention.heads_kv * dv, dv};
  backward(p);
  return g;
}

TEST(BlockPositionTest, BlockGradientsSumToTheWholeBackwardCall) {
  for (const Split& split : {kSplits[0], kSplits[1], kSplits[2]})
    for (const Modifiers& mods : ModifierCases()) {
      SCOPED_TRACE(mods.name + " Nq=" + std::to_string(split.Nq) + " Nk=" + std::to_string(split.Nk));
      const Problem problem(split.Nq, split.Nk, split.d, 13);
      const std::int64_t B = problem.batch, Hq = problem.Hq, Hkv = problem.Hkv, d = problem.d, dv = problem.dv;
      std::mt19937 random(17);
      const Floats d_o = Random(B * split.Nq * Hq * dv, random);
      AttentionParams whole_call = problem.Whole(mods);
      Output whole = Forward(whole_call);
      whole_call.o = whole.o.data(), whole_call.lse = whole.lse.data();
      const Gradients want = Backward(whole_call, d_o);

      Gradients got{Floats(want.dq.size()), Floats(want.dk.size()), Floats(want.dv.size())};
      for (const auto& [i0, n] : Ranges(split.row_split, split.Nq)) {
        const Floats o = Rows(whole.o, B, split.Nq, Hq * dv, i0, n), block_d_o = Rows(d_o, B, split.Nq, Hq * dv, i0, n);
        Floats lse;
        for (std::int64_t bh = 0; bh < B * Hq; ++bh)
          lse.insert(lse.end(), whole.lse.begin() + bh * split.Nq + i0, whole.lse.begin() + bh * split.Nq + i0 + n);
        for (const auto& [j0, m] : Ranges(split.key_split, split.Nk)) {
          AttentionParams block = problem.Block(mods, i0, n, j0, m);
          block.o = const_cast<float*>(o.data()), block.lse = lse.data();  // read, never written
          const Gradients g = Backward(block, block_d_o);
          AddRows(g.dq, B, split.Nq, Hq * d, i0, n, got.dq);
          AddRows(g.dk, B, split.Nk, Hkv * d, j0, m, got.dk);
          AddRows(g.dv, B, split.Nk, Hkv * dv, j0, m, got.dv);
        }
      }
      EXPECT_LT(RelativeError(got.dq, want.dq), 1e-4);
      EXPECT_LT(RelativeError(got.dk, want.dk), 1e-4);
      EXPECT_LT(RelativeError(got.dv, want.dv), 1e-4);
    }
}

// Runs `call` expecting an Error whose message names every one of `words`, and checks that o is untouched.
template <class Call>
void ExpectRejected(Call call, const Floats& o_before, const Floats& o, const std::vector<std::string>& words) {
  try {
    call();
    ADD_FAILURE() << "accepted";
  } catch (const Error& error) {
    for (const std::string& word : words)
      EXPECT_NE(std::string(error.what()).find(word), std::string::npos) << error.what();
  }
  EXPECT_EQ(0, std::memcmp(o.data(), o_before.data(), o.size() * sizeof(float)));  // NaN-safe comparison
}

TEST(BlockPositionTest, InvalidPositionsAreRejectedAndNothingIsWritten) {
  const Problem problem(20, 30, 16, 1);
  const Modifiers mods;
  Floats o(static_cast<std::size_t>(problem.batch * 10 * problem.Hq * problem.dv), std::nanf("7"));
  const Floats o_before = o;
  struct Bad {
    BlockPosition at;
    std::vector<std::string> words;
  };
  const Bad bad[] = {
      {{-1, 0, 20, 30}, {"block_position.query_start", "-1"}},
      {{0, -3, 20, 30}, {"block_position.key_start", "-3"}},
      {{11, 0, 20, 30}, {"block_position.query_start + seqlen_q", "11 + 10", "block_position.total_seqlen_q = 20"}},
      {{0, 25, 20, 30}, {"block_position.key_start + seqlen_k", "25 + 10", "block_position.total_seqlen_k = 30"}},
      {{0, 0, -2, 30}, {"block_position.total_seqlen_q", "-2"}},
      {{0, 0, 20, 9}, {"block_position.key_start + seqlen_k", "0 + 10", "9"}},
      {{1, 0, -1, -1}, {"block_position.query_start + seqlen_q", "1 + 10", "the call's own length"}},
      {{0, 0, std::numeric_limits<std::int64_t>::max(), 30}, {"block_position.total_seqlen_q"}},
  };
  for (const Bad& b : bad) {
    AttentionParams p = problem.Block(mods, 0, 10, 0, 10);
    p.block_position = b.at;
    p.o = o.data();
    ExpectRejected([&] { forward(p); }, o_before, o, b.words);
  }
  // Dropout's counters cover the whole problem, not the block.
  AttentionParams p = problem.Block(mods, 0, 10, 0, 10);
  p.dropout_p = 0.5f;
  p.block_position.total_seqlen_q = std::int64_t{1} << 60;
  p.block_position.total_seqlen_k = std::int64_t{1} << 60;
  p.o = o.data();
  ExpectRejected([&] { forward(p); }, o_before, o, {"dropout", "seqlen_q=1152921504606846976"});
}

TEST(BlockPositionTest, VarlenRejectsABlockPosition) {
  const Problem problem(10, 10, 16, 1);
  Floats o(static_cast<std::size_t>(10 * problem.Hq * problem.dv), std::nanf("7"));
  const Floats o_before = o;
  const std::int32_t cu[] = {0, 4, 10};
  VarlenParams p;
  p.q = problem.q.data(), p.k = problem.k.data(), p.v = problem.v.data(), p.o = o.data();
  p.cu_seqlens_q = cu, p.cu_seqlens_k = cu;
  p.batch = 2, p.total_q = p.total_k = 10, p.max_seqlen_q = p.max_seqlen_k = 6;
  p.heads_q = problem.Hq, p.heads_kv = problem.Hkv, p.head_dim = problem.d;
  forward_varlen(p);  // the default position is accepted
  std::fill(o.begin(), o.end(), std::nanf("7"));
  p.block_position.key_start = 2;
  ExpectRejected([&] { forward_varlen(p); }, o_before, o, {"block_position", "varlen", "{0, 2, -1, -1}"});
}

// ---- Decode over a shard of each sequence's cache ---------------------------------------------------------

// A batch of sequences of different lengths in one contiguous cache (batch, Nmax, Hkv, d), float32.
struct DecodeProblem {
  std::int64_t Nq = 0, Hq = 4, Hkv = 2, d = 40, Nmax = 0;
  std::vector<std::int32_t> lengths;
  Floats q, k_cache, v_cache, slopes;

  DecodeProblem(std::int64_t Nq_, std::vector<std::int32_t> lengths_, std::uint32_t seed)
      : Nq(Nq_), lengths(std::move(lengths_)) {
    Nmax = *std::max_element(lengths.begin(), lengths.end());
    std::mt19937 random(seed);
    const auto B = static_cast<std::int64_t>(lengths.size());
    q = Random(B * Nq * Hq * d, random);
    k_cache = Random(B * Nmax * Hkv * d, random);
    v_cache = Random(B * Nmax * Hkv * d, random);
    for (std::int64_t h = 0; h < Hq; ++h) slopes.push_back(0.1f * static_cast<float>(h + 1));
  }

  // The call over keys [first, first + count[b]) of every sequence b (first the same for all), which are
  // followed by keys_after[b] more (null: the whole cache from `first`).
  Output Decode(const Modifiers& m, std::int64_t first, const std::vector<std::int32_t>& count,
                const std::vector<std::int32_t>* keys_after) const {
    const auto B = static_cast<std::int64_t>(lengths.size());
    Output out{Floats(static_cast<std::size_t>(B * Nq * Hq * d)), Floats(static_cast<std::size_t>(B * Hq * Nq))};
    DecodeParams p;
    p.q = q.data();
    p.k_cache = const_cast<float*>(k_cache.data()) + first * Hkv * d;  // read, never written (no new keys)
    p.v_cache = const_cast<float*>(v_cache.data()) + first * Hkv * d;
    p.o = out.o.data(), p.lse = out.lse.data();
    p.cache_seqlens = count.data();
    p.keys_after = keys_after == nullptr ? nullptr : keys_after->data();
    p.batch = B, p.seqlen_q = Nq, p.heads_q = Hq, p.heads_kv = Hkv, p.head_dim = d;
    p.cache_seqlen_max = Nmax - first;
    p.causal = m.causal, p.window_left = m.window_left, p.window_right = m.window_right;
    if (m.alibi) p.alibi_slopes = slopes.data();
    p.set_contiguous_strides();
    p.cache_strides.batch = Nmax * Hkv * d;
    decode(p);
    return out;
  }
};

TEST(BlockPositionTest, DecodeShardsWithKeysAfterMergeToTheWholeCache) {
  const std::vector<Modifiers> mods = {{"none"},
                                       {"alibi", false, -1, -1, true},
                                       {"causal+alibi", true, -1, -1, true},
                                       {"window+alibi", false, 20, 0, true},
                                       {"causal window", true, 7, -1}};
  for (const std::int64_t Nq : {1, 3})
    for (const Modifiers& m : mods) {
      SCOPED_TRACE(m.name + " Nq=" + std::to_string(Nq));
      const DecodeProblem problem(Nq, {97, 113, 41}, 9);
      const Output whole = problem.Decode(m, 0, problem.lengths, nullptr);
      // Keys [0, 37) then [37, N) of each sequence: the first shard is followed by N − 37 keys.
      constexpr std::int32_t kSplit = 37;
      std::vector<std::int32_t> first_count, after_first, second_count;
      for (const std::int32_t n : problem.lengths) {
        first_count.push_back(kSplit);
        after_first.push_back(n - kSplit);
        second_count.push_back(n - kSplit);
      }
      const std::vector<std::int32_t> none_after(problem.lengths.size(), 0);
      const Output merged =
          Merge({problem.Decode(m, 0, first_count, &after_first), problem.Decode(m, kSplit, second_count, &none_after)},
                static_cast<std::int64_t>(problem.lengths.size()), Nq, problem.Hq, problem.d);
      EXPECT_LT(RelativeError(merged.o, whole.o), 2e-5);
      EXPECT_LT(RelativeError(merged.lse, whole.lse), 2e-6);
    }
}

TEST(BlockPositionTest, DecodeRejectsANegativeKeysAfter) {
  const DecodeProblem problem(1, {10, 12}, 1);
  const std::vector<std::int32_t> after = {0, -4};
  try {
    problem.Decode({"none"}, 0, problem.lengths, &after);
    ADD_FAILURE() << "accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("keys_after[1] must be >= 0, got -4"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace flashattn::testing
