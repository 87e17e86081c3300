// Bad input and vanished ranks: every rank gets the same clear Error, nothing the caller owns is written,
// and nobody hangs.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "distributed/agreement.h"
#include "distributed/comm.h"
#include "distributed/ring.h"
#include "flashattn/distributed.h"
#include "flashattn/flashattn.h"
#include "mpi_test_support.h"

namespace flashattn::distributed::testing {
namespace {

// A valid zigzag shard of a causal problem (N = 50, batch 1, Hq 4, Hkv 2, d 16), owning its buffers.
struct Shard {
  std::int64_t seqlen = 50;
  ShardLayout layout = ShardLayout::kZigzag;
  Tensor q, k, v, o, d_o, dq, dk, dv;
  std::vector<float> lse;
  RingParams params;

  explicit Shard(std::int64_t head_dim = 16, std::int64_t heads_q = 4) {
    const std::int64_t rows = shard_length(seqlen, WorldSize(), WorldRank(), layout);
    q = RandomTensor(1, rows, heads_q, head_dim, DType::kF32, 1);
    k = RandomTensor(1, rows, 2, head_dim, DType::kF32, 2);
    v = RandomTensor(1, rows, 2, head_dim, DType::kF32, 3);
    d_o = RandomTensor(1, rows, heads_q, head_dim, DType::kF32, 4);
    o = NanTensor(1, rows, heads_q, head_dim, DType::kF32);
    dq = NanTensor(1, rows, heads_q, head_dim, DType::kF32);
    dk = NanTensor(1, rows, 2, head_dim, DType::kF32);
    dv = NanTensor(1, rows, 2, head_dim, DType::kF32);
    lse.assign(static_cast<std::size_t>(heads_q * rows), std::numeric_limits<float>::quiet_NaN());
    AttentionParams& p = params.local;
    p.q = q.data(), p.k = k.data(), p.v = v.data(), p.o = o.data(), p.lse = lse.data();
    p.seqlen_q = p.seqlen_k = rows;
    p.heads_q = heads_q, p.heads_kv = 2, p.head_dim = head_dim;
    p.causal = true;
    p.num_threads = 1;
    p.set_contiguous_strides();
    params.seqlen = seqlen;
    params.layout = layout;
    params.timeout_seconds = 20;
  }

  RingBackwardParams Backward() {
    RingBackwardParams b;
    b.local.attention = params.local;
    b.local.d_o = d_o.data(), b.local.dq = dq.data(), b.local.dk = dk.data(), b.local.dv = dv.data();
    b.local.set_contiguous_strides();
    b.seqlen = seqlen;
    b.layout = layout;
    b.timeout_seconds = params.timeout_seconds;
    return b;
  }
};

bool AllNaN(const Tensor& t) {
  for (float value : t.Floats())
    if (!std::isnan(value)) return false;
  return true;
}

// Runs `call` on this rank and expects Error whose message holds every one of `parts`.
void ExpectError(const std::function<void()>& call, const std::vector<std::string>& parts, const std::string& context) {
  try {
    call();
    ADD_FAILURE() << context << ": no Error on rank " << WorldRank();
  } catch (const Error& error) {
    for (const std::string& part : parts)
      EXPECT_NE(std::string(error.what()).find(part), std::string::npos)
          << context << ": rank " << WorldRank() << " got \"" << error.what() << "\", expected \"" << part << "\"";
  }
}

TEST(Errors, RanksThatDisagreeAllGetTheSameError) {
  const int world = WorldSize(), last = world - 1;
  if (world < 2) GTEST_SKIP() << "needs two ranks";
  const bool odd_one = WorldRank() == last;
  {
    Shard shard(odd_one ? 32 : 16);
    ExpectError([&] { ring_forward(shard.params, MPI_COMM_WORLD); },
                {"ring_forward", "disagree on head_dim", "16 on rank", "32 on rank " + std::to_string(last)},
                "head_dim");
    EXPECT_TRUE(AllNaN(shard.o));
  }
  {
    Shard shard(16, odd_one ? 6 : 4);
    ExpectError([&] { ring_forward(shard.params, MPI_COMM_WORLD); }, {"disagree on heads_q"}, "heads_q");
  }
  {
    Shard shard;
    if (odd_one) shard.params.local.causal = false;
    ExpectError([&] { ring_forward(shard.params, MPI_COMM_WORLD); }, {"disagree on causal"}, "causal");
    EXPECT_TRUE(AllNaN(shard.o));
  }
  {
    Shard shard;
    if (odd_one) shard.params.local.window_left = 5;
    RingBackwardParams backward = shard.Backward();
    ExpectError([&] { ring_backward(backward, MPI_COMM_WORLD); }, {"ring_backward", "disagree on window_left"},
                "window_left");
    EXPECT_TRUE(AllNaN(shard.dq));
  }
  {
    // Different layouts also give different local lengths: both are reported.
    Shard shard;
    if (odd_one) shard.params.layout = ShardLayout::kContiguous;
    ExpectError([&] { ring_forward(shard.params, MPI_COMM_WORLD); }, {"disagree on layout"}, "layout");
  }
  {
    Shard shard;
    ExpectError(
        [&] {
          if (odd_one) {
            ring_backward(shard.Backward(), MPI_COMM_WORLD);
          } else {
            ring_forward(shard.params, MPI_COMM_WORLD);
          }
        },
        {"different calls", "ring_forward on rank", "ring_backward on rank " + std::to_string(last)}, "calls");
  }
}

TEST(Errors, OneRanksBadInputFailsEveryRank) {
  const int last = WorldSize() - 1;
  const bool odd_one = WorldRank() == last;
  const std::string on_last = "invalid input on rank " + std::to_string(last);
  {
    Shard shard;
    if (odd_one) shard.params.local.q = nullptr;
    ExpectError([&] { ring_forward(shard.params, MPI_COMM_WORLD); }, {on_last, "null"}, "null q");
    EXPECT_TRUE(AllNaN(shard.o));
  }
  {
    Shard shard;
    if (odd_one) shard.params.local.seqlen_q += 1;
    ExpectError([&] { ring_forward(shard.params, MPI_COMM_WORLD); }, {on_last, "shard_length"}, "local length");
  }
  {
    Shard shard;
    const float additive = 0.0f;
    shard.params.local.mask.kind = MaskKind::kAdditive;
    shard.params.local.mask.data = &additive;
    shard.params.local.mask.stride_col = 0;
    ExpectError([&] { ring_forward(shard.params, MPI_COMM_WORLD); }, {"invalid input on", "mask tensor"}, "mask");
  }
  {
    Shard shard;
    if (odd_one) shard.params.timeout_seconds = 0;
    ExpectError([&] { ring_forward(shard.params, MPI_COMM_WORLD); }, {on_last, "timeout_seconds must be > 0"},
                "timeout");
  }
  {
    Shard shard;
    RingBackwardParams backward = shard.Backward();
    if (odd_one) backward.local.attention.lse = nullptr;
    ExpectError([&] { ring_backward(backward, MPI_COMM_WORLD); }, {on_last, "lse"}, "backward without lse");
    EXPECT_TRUE(AllNaN(shard.dq));
    EXPECT_TRUE(AllNaN(shard.dk));
  }
}

// Sinks that are invalid on one rank, or differ between ranks, fail every rank before anything is written.
TEST(Errors, SinksAreCheckedOnEveryRank) {
  const int world = WorldSize(), last = world - 1;
  const bool odd_one = WorldRank() == last;
  const std::string on_last = "invalid input on rank " + std::to_string(last);
  std::vector<float> sinks = {0.5f, -1.0f, -INFINITY, 2.0f}, dsinks(4, std::numeric_limits<float>::quiet_NaN());
  {
    Shard shard;
    std::vector<float> mine = sinks;
    if (odd_one) mine[1] = std::numeric_limits<float>::quiet_NaN();
    shard.params.local.sinks = mine.data();
    ExpectError([&] { ring_forward(shard.params, MPI_COMM_WORLD); }, {on_last, "sinks must be finite or -inf"},
                "NaN sink");
    EXPECT_TRUE(AllNaN(shard.o));
    RingBackwardParams backward = shard.Backward();
    backward.local.dsinks = dsinks.data();
    ExpectError([&] { ring_backward(backward, MPI_COMM_WORLD); }, {on_last, "sinks must be finite or -inf"},
                "NaN sink, backward");
    EXPECT_TRUE(AllNaN(shard.dq));
    EXPECT_TRUE(std::isnan(dsinks[0]));
  }
  {
    Shard shard;
    RingBackwardParams backward = shard.Backward();
    if (odd_one) backward.local.dsinks = dsinks.data();
    ExpectError([&] { ring_backward(backward, MPI_COMM_WORLD); }, {on_last, "dsinks is set but"}, "dsinks alone");
  }
  if (world < 2) return;
  {
    Shard shard;
    shard.params.local.sinks = odd_one ? nullptr : sinks.data();
    ExpectError([&] { ring_forward(shard.params, MPI_COMM_WORLD); }, {"disagree on sinks given"}, "sinks given");
  }
  {
    Shard shard;
    std::vector<float> mine = sinks;
    if (odd_one) mine[3] = 2.5f;
    shard.params.local.sinks = mine.data();
    ExpectError(
        [&] { ring_forward(shard.params, MPI_COMM_WORLD); },
        {"ring_forward: the ranks disagree on local.sinks[3]", "2 on rank", "2.5 on rank " + std::to_string(last)},
        "sink values");
    EXPECT_TRUE(AllNaN(shard.o));
    std::fill(shard.lse.begin(), shard.lse.end(), 0.0f);  // valid, as a forward call would have left it
    RingBackwardParams backward = shard.Backward();
    backward.local.dsinks = dsinks.data();
    ExpectError([&] { ring_backward(backward, MPI_COMM_WORLD); }, {"disagree on local.attention.sinks[3]"},
                "sink values, backward");
    EXPECT_TRUE(AllNaN(shard.dq));
    EXPECT_TRUE(std::isnan(dsinks[0]));
  }
}

// A communicator of its own for the tests where a rank leaves: the others' abandoned operations stay on it.
MPI_Comm ThrowawayComm() {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  return comm;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST(Errors, ARankThatNeverComesMakesTheOthersFailInTime) {
  const int world = WorldSize(), last = world - 1;
  if (world < 2) GTEST_SKIP() << "needs two ranks";
  const MPI_Comm comm = ThrowawayComm();
  if (WorldRank() != last) {
    Shard shard;
    shard.params.timeout_seconds = 1.0;
    const auto start = std::chrono::steady_clock::now();
    ExpectError([&] { ring_forward(shard.params, comm); }, {"waited more than timeout_seconds=1", "left the call"},
                "absent rank");
    EXPECT_LT(SecondsSince(start), 10.0);
    EXPECT_TRUE(AllNaN(shard.o));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(Errors, ARankThatLeavesAfterTheCheckMakesTheOthersFailInTime) {
  const int world = WorldSize(), last = world - 1;
  if (world < 2) GTEST_SKIP() << "needs two ranks";
  const MPI_Comm comm = ThrowawayComm();
  Shard shard;
  shard.params.timeout_seconds = 1.0;
  if (WorldRank() == last) {
    // Enters the call as ring_forward does, passes the collective check, and leaves before any transfer.
    const CallComm call(comm, "ring_forward", 1.0);
    AgreeOrThrow(call, RingFields(shard.params.local, shard.params.seqlen, shard.params.layout), "");
  } else {
    const auto start = std::chrono::steady_clock::now();
    ExpectError([&] { ring_forward(shard.params, comm); }, {"waited more than timeout_seconds=1"}, "leaving rank");
    EXPECT_LT(SecondsSince(start), 10.0);
    EXPECT_TRUE(AllNaN(shard.o));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  // The ring still works afterwards, on a fresh call.
  Shard again;
  ring_forward(again.params, MPI_COMM_WORLD);
  EXPECT_FALSE(AllNaN(again.o) && again.o.Elements() > 0);
}

}  // namespace
}  // namespace flashattn::distributed::testing
