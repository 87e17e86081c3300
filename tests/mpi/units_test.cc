// The parts of flashattn::mpi that need no other rank: the layouts, the blocks and their place in the
// sequence, and the running state's merge.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "distributed/block.h"
#include "distributed/running_state.h"
#include "flashattn/decode.h"
#include "flashattn/distributed.h"
#include "flashattn/flashattn.h"

namespace flashattn::distributed {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

TEST(Layout, ShardsPartitionTheSequence) {
  for (ShardLayout layout : {ShardLayout::kContiguous, ShardLayout::kZigzag})
    for (int world = 1; world <= 5; ++world)
      for (std::int64_t seqlen : {0, 1, 3, 7, 97, 113, 1025}) {
        std::vector<std::int64_t> seen;
        for (int rank = 0; rank < world; ++rank) {
          const std::vector<std::int64_t> rows = shard_indices(seqlen, world, rank, layout);
          EXPECT_EQ(static_cast<std::int64_t>(rows.size()), shard_length(seqlen, world, rank, layout));
          seen.insert(seen.end(), rows.begin(), rows.end());
        }
        std::sort(seen.begin(), seen.end());
        ASSERT_EQ(static_cast<std::int64_t>(seen.size()), seqlen) << to_string(layout) << " W=" << world;
        for (std::int64_t i = 0; i < seqlen; ++i) EXPECT_EQ(seen[static_cast<std::size_t>(i)], i);
      }
}

TEST(Layout, ZigzagHoldsChunksRAndTwoWMinusOneMinusR) {
  // N = 20, W = 2: chunks of 5 rows; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
  EXPECT_EQ(shard_indices(20, 2, 0, ShardLayout::kZigzag),
            (std::vector<std::int64_t>{0, 1, 2, 3, 4, 15, 16, 17, 18, 19}));
  EXPECT_EQ(shard_indices(20, 2, 1, ShardLayout::kZigzag),
            (std::vector<std::int64_t>{5, 6, 7, 8, 9, 10, 11, 12, 13, 14}));
  // N = 7, W = 2: chunk c = [⌊7c/4⌋, ⌊7(c+1)/4⌋) = [0,1) [1,3) [3,5) [5,7).
  EXPECT_EQ(shard_indices(7, 2, 0, ShardLayout::kZigzag), (std::vector<std::int64_t>{0, 5, 6}));
  EXPECT_EQ(shard_indices(7, 2, 1, ShardLayout::kZigzag), (std::vector<std::int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(shard_indices(10, 3, 1, ShardLayout::kContiguous), (std::vector<std::int64_t>{3, 4, 5}));
}

TEST(Layout, RejectsBadArguments) {
  EXPECT_THROW(shard_length(-1, 2, 0, ShardLayout::kZigzag), Error);
  EXPECT_THROW(shard_length(10, 0, 0, ShardLayout::kZigzag), Error);
  EXPECT_THROW(shard_indices(10, 2, 2, ShardLayout::kContiguous), Error);
  EXPECT_THROW(shard_indices(10, 2, -1, ShardLayout::kContiguous), Error);
  EXPECT_EQ(parse_layout("zigzag"), ShardLayout::kZigzag);
  EXPECT_EQ(parse_layout("contiguous"), ShardLayout::kContiguous);
  try {
    parse_layout("ring", "--layout");
    ADD_FAILURE() << "parse_layout accepted \"ring\"";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("--layout"), std::string::npos) << error.what();
  }
}

// Every block of rows against keys, trimmed to its visible part and given to the library by LocalCall,
// computes exactly the band's pairs at global positions.
TEST(Block, VisiblePartAndItsLocalCallSeeTheBand) {
  std::mt19937 random(7);
  constexpr std::int64_t kSeqlen = 80;
  std::vector<float> inputs(kSeqlen), output(kSeqlen);  // q, k, v and o: one element per position
  AttentionParams base;
  base.q = base.k = base.v = inputs.data();
  base.o = output.data();
  base.seqlen_q = base.seqlen_k = kSeqlen;
  base.head_dim = 1;
  base.set_contiguous_strides();
  const std::pair<std::int64_t, std::int64_t> windows[] = {{-1, -1}, {-1, 0}, {5, 0}, {3, 7}, {0, 0}, {12, -1}, {-1, 4}};
  for (const auto& [left, right] : windows)
    for (int trial = 0; trial < 300; ++trial) {
      const Band band = Band::Of(false, left, right);
      base.window_left = left, base.window_right = right;
      Block block;
      block.rows = random() % 20 + 1;
      block.keys = random() % 20 + 1;
      block.row_position = random() % 60;
      block.key_position = random() % 60;
      std::set<std::pair<std::int64_t, std::int64_t>> expected;
      for (std::int64_t i = 0; i < block.rows; ++i)
        for (std::int64_t j = 0; j < block.keys; ++j)
          if (band.Sees(block.row_position + i, block.key_position + j)) expected.insert({i, j});
      const std::optional<Block> part = VisiblePart(band, block);
      ASSERT_EQ(part.has_value(), !expected.empty());
      if (!part) continue;
      const AttentionParams call = LocalCall(base, kSeqlen, *part);
      validate(call);
      const ScoreModifiers library(call, 0, 0);
      std::set<std::pair<std::int64_t, std::int64_t>> got;
      for (std::int64_t i = 0; i < part->rows; ++i) {
        // ALiBi's distance is the global one: local row i on the global diagonal in local key positions.
        EXPECT_EQ(library.Diagonal(i), part->row_position + i - part->key_position);
        for (std::int64_t j = 0; j < part->keys; ++j)
          if (library.Visible(i, j))
            got.insert({part->row_begin + i - block.row_begin, part->key_begin + j - block.key_begin});
      }
      EXPECT_EQ(got, expected) << "window (" << left << ", " << right << ") rows " << block.row_position << "+"
                               << block.rows << " keys " << block.key_position << "+" << block.keys;
    }
}

TEST(RunningState, EmptyPartialIsANoOpAndTwoEmptyStatesStayEmpty) {
  RunningState state(1, 2, 1, 3);
  const float empty_o[6] = {0, 0, 0, 0, 0, 0};
  const float empty_lse[2] = {kNegInf, kNegInf};
  state.Merge(0, 2, empty_o, empty_lse);  // empty into empty
  for (std::int64_t i = 0; i < 2; ++i) {
    EXPECT_EQ(state.Lse(0, i, 0), kNegInf);
    for (int e = 0; e < 3; ++e) EXPECT_EQ(state.O(0, i, 0)[e], 0.0f);
  }
  const float o[6] = {1, 2, 3, 4, 5, 6};
  const float lse[2] = {0.5f, -2.0f};
  state.Merge(0, 2, o, lse);              // a partial into the empty state: the partial
  state.Merge(0, 2, empty_o, empty_lse);  // then an empty one: unchanged
  EXPECT_EQ(state.Lse(0, 0, 0), 0.5f);
  EXPECT_EQ(state.Lse(0, 1, 0), -2.0f);
  for (int e = 0; e < 3; ++e) {
    EXPECT_EQ(state.O(0, 0, 0)[e], o[e]);
    EXPECT_EQ(state.O(0, 1, 0)[e], o[3 + e]);
  }
  // Two equal partials: LSE + log 2, the same O.
  state.Merge(0, 2, o, lse);
  EXPECT_NEAR(state.Lse(0, 0, 0), 0.5f + std::log(2.0f), 1e-6);
  EXPECT_NEAR(state.O(0, 1, 0)[2], 6.0f, 1e-6);
}

TEST(RunningState, AgreesWithMergeAttentionStates) {
  // Three partials of 2 rows × 2 heads × dv 3, one row empty in one partial.
  const float o[3][12] = {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
                          {-1, 0, 1, 2, 2, 2, 0.5, 0.5, 0.5, 3, 2, 1},
                          {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}};
  const float lse[3][4] = {
      {1.0f, 2.0f, -1.0f, 0.0f}, {0.5f, kNegInf, 3.0f, -4.0f}, {kNegInf, kNegInf, kNegInf, kNegInf}};
  RunningState state(1, 2, 2, 3);
  for (int k = 0; k < 3; ++k) state.Merge(0, 2, o[k], lse[k]);
  std::vector<float> o_partials, lse_partials;
  for (int k = 0; k < 3; ++k) {
    o_partials.insert(o_partials.end(), o[k], o[k] + 12);
    lse_partials.insert(lse_partials.end(), lse[k], lse[k] + 4);
  }
  std::vector<float> merged_o(12), merged_lse(4);
  MergeParams merge;
  merge.o_partials = o_partials.data();
  merge.lse_partials = lse_partials.data();
  merge.o = merged_o.data();
  merge.lse = merged_lse.data();
  merge.num_partials = 3;
  merge.seqlen = 2;
  merge.heads = 2;
  merge.head_dim_v = 3;
  merge.set_contiguous_strides();
  merge_attention_states(merge);
  for (std::int64_t i = 0; i < 2; ++i)
    for (std::int64_t h = 0; h < 2; ++h) {
      EXPECT_NEAR(state.Lse(0, i, h), merged_lse[static_cast<std::size_t>(h * 2 + i)], 1e-6);
      for (int e = 0; e < 3; ++e)
        EXPECT_NEAR(state.O(0, i, h)[e], merged_o[static_cast<std::size_t>((i * 2 + h) * 3 + e)], 1e-5);
    }
}

}  // namespace
}  // namespace flashattn::distributed
