// ring_forward and ring_backward against one process and the float64 oracle on the whole sequence: every
// rank draws the same global problem, computes the references itself and checks its own rows. ALiBi and
// dropout are at global positions: the oracle drops what one process with the same seed drops.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "flashattn/backward.h"
#include "flashattn/distributed.h"
#include "flashattn/flashattn.h"
#include "mpi_test_support.h"

namespace flashattn::distributed::testing {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct RingCase {
  ShardLayout layout = ShardLayout::kZigzag;
  std::int64_t seqlen = 97;
  std::int64_t batch = 2, Hq = 4, Hkv = 2, d = 40, dv = 40;
  DType dtype = DType::kF32;
  bool causal = false;
  std::int64_t window_left = -1, window_right = -1;
  float softcap = 0.0f;
  std::optional<float> scale;
  bool alibi = false;  // slopes per (batch, head)
  float dropout_p = 0.0f;
  std::vector<float> sinks;  // one per query head, or none

  std::string Name() const {
    std::ostringstream name;
    name << to_string(layout) << " N=" << seqlen << " b=" << batch << " Hq=" << Hq << " Hkv=" << Hkv << " d=" << d
         << " dv=" << dv << " " << to_string(dtype) << (causal ? " causal" : "") << " window=(" << window_left << ","
         << window_right << ")";
    if (softcap > 0) name << " softcap=" << softcap;
    if (scale) name << " scale=" << *scale;
    if (alibi) name << " alibi";
    if (dropout_p > 0) name << " dropout=" << dropout_p;
    if (!sinks.empty()) name << " sinks";
    return name.str();
  }
};

// The whole sequence's tensors and the call over them (num_threads 1: W ranks share 2 cores).
struct GlobalProblem {
  RingCase c;
  Tensor q, k, v, d_o;
  std::vector<float> slopes;  // ALiBi's (batch, Hq)

  explicit GlobalProblem(const RingCase& c, std::uint64_t seed)
      : c(c),
        q(RandomTensor(c.batch, c.seqlen, c.Hq, c.d, c.dtype, seed)),
        k(RandomTensor(c.batch, c.seqlen, c.Hkv, c.d, c.dtype, seed + 1)),
        v(RandomTensor(c.batch, c.seqlen, c.Hkv, c.dv, c.dtype, seed + 2)),
        d_o(RandomTensor(c.batch, c.seqlen, c.Hq, c.dv, c.dtype, seed + 3)) {
    for (std::int64_t n = 0; n < c.batch * c.Hq; ++n) slopes.push_back(0.03f * static_cast<float>(n + 1));
  }

  // The attention call over (q, k, v) of any shard or of the whole sequence, writing o and lse.
  AttentionParams Params(const Tensor& q_, const Tensor& k_, const Tensor& v_, Tensor& o, float* lse) const {
    AttentionParams p;
    p.q = q_.data();
    p.k = k_.data();
    p.v = v_.data();
    p.o = o.data();
    p.lse = lse;
    p.batch = c.batch;
    p.seqlen_q = q_.seq;
    p.seqlen_k = k_.seq;
    p.heads_q = c.Hq;
    p.heads_kv = c.Hkv;
    p.head_dim = c.d;
    p.head_dim_v = c.dv;
    p.dtype = q_.dtype;
    p.causal = c.causal;
    p.window_left = c.window_left;
    p.window_right = c.window_right;
    p.softcap = c.softcap;
    p.scale = c.scale;
    if (c.alibi) p.alibi_slopes = slopes.data(), p.alibi_batch_stride = c.Hq;
    p.dropout_p = c.dropout_p, p.dropout_seed = 0x5eed, p.dropout_offset = 12;
    p.sinks = c.sinks.empty() ? nullptr : c.sinks.data();
    p.num_threads = 1;
    p.set_contiguous_strides();
    return p;
  }
};

Tensor Widened(const Tensor& t) {
  Tensor wide(t.batch, t.seq, t.heads, t.dim, DType::kF32);
  wide.Assign(t.Floats());
  return wide;
}

struct ForwardResult {
  Tensor o;
  std::vector<float> lse;
};

ForwardResult SingleForward(const GlobalProblem& g, const Tensor& q, const Tensor& k, const Tensor& v,
                            Algorithm algorithm) {
  ForwardResult r{NanTensor(g.c.batch, q.seq, g.c.Hq, g.c.dv, q.dtype),
                  std::vector<float>(static_cast<std::size_t>(g.c.batch * g.c.Hq * q.seq), kNaN)};
  forward(g.Params(q, k, v, r.o, r.lse.data()), algorithm);
  return r;
}

struct LocalShard {
  std::vector<std::int64_t> rows;
  Tensor q, k, v, d_o;
};

LocalShard ShardOf(const GlobalProblem& g) {
  LocalShard s;
  s.rows = shard_indices(g.c.seqlen, WorldSize(), WorldRank(), g.c.layout);
  s.q = SelectRows(g.q, s.rows);
  s.k = SelectRows(g.k, s.rows);
  s.v = SelectRows(g.v, s.rows);
  s.d_o = SelectRows(g.d_o, s.rows);
  return s;
}

ForwardResult RingForward(const GlobalProblem& g, const LocalShard& s) {
  ForwardResult r{NanTensor(g.c.batch, s.q.seq, g.c.Hq, g.c.dv, g.c.dtype),
                  std::vector<float>(static_cast<std::size_t>(g.c.batch * g.c.Hq * s.q.seq), kNaN)};
  RingParams params;
  params.local = g.Params(s.q, s.k, s.v, r.o, r.lse.data());
  params.seqlen = g.c.seqlen;
  params.layout = g.c.layout;
  params.timeout_seconds = 30;
  ring_forward(params, MPI_COMM_WORLD);
  return r;
}

struct Gradients {
  Tensor dq, dk, dv;
  std::vector<float> dsinks;  // (Hq) when the case has sinks: one process's gradient, or a rank's share
};

Gradients NanGradients(const RingCase& c, std::int64_t rows, DType dtype) {
  return {NanTensor(c.batch, rows, c.Hq, c.d, dtype), NanTensor(c.batch, rows, c.Hkv, c.d, dtype),
          NanTensor(c.batch, rows, c.Hkv, c.dv, dtype), std::vector<float>(c.sinks.size(), kNaN)};
}

BackwardParams BackwardCall(const AttentionParams& attention, const Tensor& d_o, Gradients& grads) {
  BackwardParams b;
  b.attention = attention;
  b.d_o = d_o.data();
  b.dq = grads.dq.data();
  b.dk = grads.dk.data();
  b.dv = grads.dv.data();
  b.dsinks = grads.dsinks.empty() ? nullptr : grads.dsinks.data();
  b.set_contiguous_strides();
  return b;
}

// The whole sinks' gradient: the sum of the ranks' shares.
std::vector<double> SumOverRanks(const std::vector<float>& share) {
  std::vector<double> mine(share.begin(), share.end()), total(share.size());
  MPI_Allreduce(mine.data(), total.data(), static_cast<int>(mine.size()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

template <typename A, typename B>
double MaxDifference(const std::vector<A>& a, const std::vector<B>& b) {
  double error = 0.0;
  for (std::size_t h = 0; h < a.size(); ++h) {
    const double difference = std::abs(static_cast<double>(a[h]) - static_cast<double>(b[h]));
    error = std::isnan(difference) ? INFINITY : std::max(error, difference);
  }
  return error;
}

Gradients RingBackward(const GlobalProblem& g, const LocalShard& s, ForwardResult& forward_result) {
  Gradients grads = NanGradients(g.c, s.q.seq, g.c.dtype);
  RingBackwardParams params;
  params.local = BackwardCall(g.Params(s.q, s.k, s.v, forward_result.o, forward_result.lse.data()), s.d_o, grads);
  params.seqlen = g.c.seqlen;
  params.layout = g.c.layout;
  params.timeout_seconds = 30;
  ring_backward(params, MPI_COMM_WORLD);
  return grads;
}

// Error bound: at most twice the single process's error against the oracle, plus a small absolute term
// that does not depend on W.
void ExpectWithinBound(const char* what, double ring_error_here, double single_error, double absolute,
                       const RingCase& c) {
  const double ring_error = MaxOverRanks(ring_error_here);
  EXPECT_LE(ring_error, 2.0 * single_error + absolute)
      << what << ": ring error " << ring_error << ", single-process error " << single_error << " (" << c.Name()
      << ", W=" << WorldSize() << ")";
}

// The matrix both passes run: both layouts × {none, causal, window (9, 4), causal + window 12} × {GQA 4/2,
// MQA 3/1} × {float32, float16, bfloat16} × the given lengths.
std::vector<RingCase> MaskHeadTypeMatrix(std::initializer_list<std::int64_t> lengths, std::int64_t batch) {
  struct Mask {
    bool causal;
    std::int64_t left, right;
  };
  const Mask masks[] = {{false, -1, -1}, {true, -1, -1}, {false, 9, 4}, {true, 12, -1}};
  const std::pair<std::int64_t, std::int64_t> heads[] = {{4, 2}, {3, 1}};
  std::vector<RingCase> cases;
  for (ShardLayout layout : {ShardLayout::kContiguous, ShardLayout::kZigzag})
    for (const Mask& mask : masks)
      for (const auto& [Hq, Hkv] : heads)
        for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16})
          for (std::int64_t seqlen : lengths) {
            RingCase c;
            c.layout = layout, c.causal = mask.causal, c.window_left = mask.left, c.window_right = mask.right;
            c.Hq = Hq, c.Hkv = Hkv, c.dtype = dtype, c.seqlen = seqlen, c.batch = batch;
            cases.push_back(c);
          }
  return cases;
}

// The modifiers that depend on global positions, on a length no W > 1 divides: both layouts × {not causal,
// causal} × {ALiBi, dropout, both with a window}.
std::vector<RingCase> PositionCases(std::int64_t seqlen, std::int64_t batch) {
  std::vector<RingCase> cases;
  for (ShardLayout layout : {ShardLayout::kContiguous, ShardLayout::kZigzag})
    for (bool causal : {false, true})
      for (int modifiers = 0; modifiers < 3; ++modifiers) {
        RingCase c;
        c.layout = layout, c.seqlen = seqlen, c.batch = batch, c.causal = causal;
        c.alibi = modifiers != 1;
        c.dropout_p = modifiers != 0 ? 0.25f : 0.0f;
        if (modifiers == 2) c.window_left = 30, c.window_right = causal ? -1 : 11;
        cases.push_back(c);
      }
  return cases;
}

std::vector<RingCase> ForwardCases() {
  std::vector<RingCase> cases = MaskHeadTypeMatrix({97, 113}, 2);
  // Fewer rows than ranks or chunks (ranks and chunks without rows), d ≠ dv, softcap and scale.
  for (ShardLayout layout : {ShardLayout::kContiguous, ShardLayout::kZigzag}) {
    for (std::int64_t seqlen : {1, 3, 7}) {
      RingCase c;
      c.layout = layout, c.seqlen = seqlen, c.causal = true;
      cases.push_back(c);
    }
    RingCase odd;
    odd.layout = layout, odd.seqlen = 101, odd.d = 59, odd.dv = 24, odd.softcap = 2.5f, odd.scale = 0.3f;
    odd.window_left = 20, odd.window_right = 0;
    cases.push_back(odd);
    // Attention sinks join each row once, after the merge of the blocks (a −∞ sink: none).
    RingCase sinks;
    sinks.layout = layout, sinks.causal = true, sinks.window_left = 30, sinks.sinks = {0.5f, -1.0f, 2.0f, -INFINITY};
    cases.push_back(sinks);
    RingCase large;  // not causal, a large positive sink that dominates its rows
    large.layout = layout, large.seqlen = 113, large.dtype = DType::kBF16, large.sinks = {30.0f, -1.0f, 6.0f, 0.0f};
    cases.push_back(large);
  }
  for (const RingCase& c : PositionCases(97, 2)) cases.push_back(c);
  return cases;
}

TEST(RingForward, MatchesOneProcessAndTheOracle) {
  std::uint64_t seed = 100;
  for (const RingCase& c : ForwardCases()) {
    const GlobalProblem g(c, seed += 10);
    const ForwardResult single = SingleForward(g, g.q, g.k, g.v, Algorithm::kFused);
    const ForwardResult oracle = SingleForward(g, Widened(g.q), Widened(g.k), Widened(g.v), Algorithm::kOracle);
    std::vector<std::int64_t> all(static_cast<std::size_t>(c.seqlen));
    for (std::int64_t i = 0; i < c.seqlen; ++i) all[static_cast<std::size_t>(i)] = i;
    const double single_o = MaxRowError(single.o, oracle.o, all);
    const double single_lse = MaxLseError(single.lse, oracle.lse);

    const LocalShard s = ShardOf(g);
    const ForwardResult ring = RingForward(g, s);
    ExpectWithinBound("O", MaxRowError(ring.o, oracle.o, s.rows), single_o, 1e-5, c);
    ExpectWithinBound("LSE", MaxLseError(ring.lse, SelectLseRows(oracle.lse, c.batch, c.Hq, c.seqlen, s.rows)),
                      single_lse, 1e-5, c);
  }
}

std::vector<RingCase> BackwardCases() {
  std::vector<RingCase> cases = MaskHeadTypeMatrix({113}, 1);
  for (ShardLayout layout : {ShardLayout::kContiguous, ShardLayout::kZigzag}) {
    RingCase few;
    few.layout = layout, few.seqlen = 3, few.causal = true;
    cases.push_back(few);
    RingCase odd;
    odd.layout = layout, odd.seqlen = 97, odd.d = 59, odd.dv = 24, odd.softcap = 2.5f, odd.batch = 2;
    cases.push_back(odd);
    // dQ, dK, dV through the LSE that counts the sinks, and the ranks' shares of dsinks: causal or not,
    // GQA, a −∞ sink, a large positive one (it dominates every row), ranks without rows (N = 3).
    for (bool causal : {false, true}) {
      RingCase sinks;
      sinks.layout = layout, sinks.causal = causal, sinks.seqlen = causal ? 97 : 113, sinks.batch = 2;
      sinks.sinks = {1.0f, -0.5f, -INFINITY, 0.0f};
      cases.push_back(sinks);
    }
    RingCase large;
    large.layout = layout, large.window_left = 9, large.window_right = 4, large.dtype = DType::kBF16;
    large.Hq = 3, large.Hkv = 1, large.sinks = {30.0f, 4.0f, -2.0f};
    cases.push_back(large);
    RingCase few_sinks = few;
    few_sinks.sinks = {0.5f, 0.5f, -INFINITY, 2.0f};
    cases.push_back(few_sinks);
  }
  for (const RingCase& c : PositionCases(113, 1)) cases.push_back(c);
  return cases;
}

TEST(RingBackward, MatchesOneProcessAndTheOracle) {
  std::uint64_t seed = 5000;
  for (const RingCase& c : BackwardCases()) {
    const GlobalProblem g(c, seed += 10);
    ForwardResult single = SingleForward(g, g.q, g.k, g.v, Algorithm::kFused);
    Gradients single_grads = NanGradients(c, c.seqlen, c.dtype);
    backward(BackwardCall(g.Params(g.q, g.k, g.v, single.o, single.lse.data()), g.d_o, single_grads));
    // The oracle recomputes O and LSE itself from float32 copies of the inputs.
    const Tensor q32 = Widened(g.q), k32 = Widened(g.k), v32 = Widened(g.v), d_o32 = Widened(g.d_o);
    ForwardResult oracle = SingleForward(g, q32, k32, v32, Algorithm::kOracle);
    Gradients oracle_grads = NanGradients(c, c.seqlen, DType::kF32);
    backward(BackwardCall(g.Params(q32, k32, v32, oracle.o, oracle.lse.data()), d_o32, oracle_grads),
             BackwardAlgorithm::kOracle);

    const LocalShard s = ShardOf(g);
    ForwardResult ring = RingForward(g, s);
    const Gradients ring_grads = RingBackward(g, s, ring);
    std::vector<std::int64_t> all(static_cast<std::size_t>(c.seqlen));
    for (std::int64_t i = 0; i < c.seqlen; ++i) all[static_cast<std::size_t>(i)] = i;
    const Tensor Gradients::*members[] = {&Gradients::dq, &Gradients::dk, &Gradients::dv};
    const char* names[] = {"dQ", "dK", "dV"};
    for (int n = 0; n < 3; ++n) {
      const Tensor& truth = oracle_grads.*members[n];
      const double absolute = 1e-5 * std::max(1.0, MaxAbs(truth));
      ExpectWithinBound(names[n], MaxRowError(ring_grads.*members[n], truth, s.rows),
                        MaxRowError(single_grads.*members[n], truth, all), absolute, c);
    }
    if (c.sinks.empty()) continue;
    const std::vector<double> ring_dsinks = SumOverRanks(ring_grads.dsinks);
    double largest = 1.0;
    for (float value : oracle_grads.dsinks) largest = std::max(largest, std::abs(static_cast<double>(value)));
    ExpectWithinBound("dsinks (the sum of the ranks' shares)", MaxDifference(ring_dsinks, oracle_grads.dsinks),
                      MaxDifference(single_grads.dsinks, oracle_grads.dsinks), 1e-5 * largest, c);
  }
}

// Sinks of −∞ are no sinks: the ring gives the same bits with them as without, and shares of dsinks of 0.
TEST(Ring, MinusInfinitySinksChangeNoBit) {
  for (ShardLayout layout : {ShardLayout::kContiguous, ShardLayout::kZigzag}) {
    RingCase none;
    none.layout = layout, none.seqlen = 113, none.causal = true, none.dtype = DType::kF16;
    RingCase minus_infinity = none;
    minus_infinity.sinks.assign(static_cast<std::size_t>(none.Hq), -INFINITY);
    const GlobalProblem without(none, 55), with(minus_infinity, 55);
    const LocalShard s = ShardOf(without);
    ForwardResult plain = RingForward(without, s), sunk = RingForward(with, s);
    EXPECT_EQ(plain.o.bytes, sunk.o.bytes) << minus_infinity.Name();
    EXPECT_EQ(0, std::memcmp(plain.lse.data(), sunk.lse.data(), plain.lse.size() * sizeof(float)));
    const Gradients a = RingBackward(without, s, plain), b = RingBackward(with, s, sunk);
    EXPECT_EQ(a.dq.bytes, b.dq.bytes) << minus_infinity.Name();
    EXPECT_EQ(a.dk.bytes, b.dk.bytes) << minus_infinity.Name();
    EXPECT_EQ(a.dv.bytes, b.dv.bytes) << minus_infinity.Name();
    EXPECT_EQ(b.dsinks, std::vector<float>(minus_infinity.sinks.size(), 0.0f)) << minus_infinity.Name();
  }
}

TEST(Ring, RunsAreBitwiseIdentical) {
  for (ShardLayout layout : {ShardLayout::kContiguous, ShardLayout::kZigzag})
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      RingCase c;
      c.layout = layout, c.dtype = dtype, c.seqlen = 300, c.causal = true, c.window_left = 150;
      const GlobalProblem g(c, 77);
      const LocalShard s = ShardOf(g);
      ForwardResult first = RingForward(g, s), second = RingForward(g, s);
      EXPECT_EQ(first.o.bytes, second.o.bytes) << c.Name();
      EXPECT_EQ(0, std::memcmp(first.lse.data(), second.lse.data(), first.lse.size() * sizeof(float))) << c.Name();
      const Gradients a = RingBackward(g, s, first), b = RingBackward(g, s, first);
      EXPECT_EQ(a.dq.bytes, b.dq.bytes) << c.Name();
      EXPECT_EQ(a.dk.bytes, b.dk.bytes) << c.Name();
      EXPECT_EQ(a.dv.bytes, b.dv.bytes) << c.Name();
    }
}

// `t` with one more head of padding per row: the same values through larger sequence and batch strides.
Tensor Padded(const Tensor& t) {
  Tensor padded = NanTensor(t.batch, t.seq, t.heads + 1, t.dim, t.dtype);
  const std::size_t row = static_cast<std::size_t>(t.heads * t.dim) * size_of(t.dtype);
  for (std::int64_t n = 0; n < t.batch * t.seq; ++n)
    std::memcpy(padded.bytes.data() + n * (t.heads + 1) * t.dim * static_cast<std::int64_t>(size_of(t.dtype)),
                t.bytes.data() + n * static_cast<std::int64_t>(row), row);
  return padded;
}

// The first `heads` heads of a padded tensor, and whether its padding head is still all NaN.
Tensor Unpadded(const Tensor& padded, bool* padding_untouched) {
  Tensor t(padded.batch, padded.seq, padded.heads - 1, padded.dim, padded.dtype);
  const std::int64_t element = static_cast<std::int64_t>(size_of(t.dtype));
  const std::size_t row = static_cast<std::size_t>(t.heads * t.dim * element);
  for (std::int64_t n = 0; n < t.batch * t.seq; ++n) {
    std::memcpy(t.bytes.data() + n * static_cast<std::int64_t>(row),
                padded.bytes.data() + n * padded.heads * t.dim * element, row);
    for (std::int64_t c = 0; c < t.dim; ++c)
      *padding_untouched =
          *padding_untouched && std::isnan(padded.At(0, 0, 0, (n * padded.heads + t.heads) * t.dim + c));
  }
  return t;
}

// Shards addressed through strides of their own (a padding head per row) give the contiguous shards' bits
// and leave the padding alone.
TEST(Ring, AcceptsStridedShards) {
  RingCase c;
  c.layout = ShardLayout::kZigzag, c.dtype = DType::kF16, c.seqlen = 113, c.causal = true, c.Hq = 3, c.Hkv = 1;
  const GlobalProblem g(c, 31);
  const LocalShard s = ShardOf(g);
  ForwardResult contiguous = RingForward(g, s);
  const Gradients contiguous_grads = RingBackward(g, s, contiguous);

  const Tensor q = Padded(s.q), k = Padded(s.k), v = Padded(s.v), d_o = Padded(s.d_o);
  Tensor o = Padded(contiguous.o);
  std::fill(o.bytes.begin(), o.bytes.end(), std::byte{0xff});  // NaN in float16
  std::vector<float> lse(contiguous.lse.size(), kNaN);
  RingParams forward_params;
  forward_params.local = g.Params(q, k, v, o, lse.data());
  forward_params.local.heads_q = c.Hq, forward_params.local.heads_kv = c.Hkv;
  forward_params.local.q_strides = q.strides(), forward_params.local.k_strides = k.strides();
  forward_params.local.v_strides = v.strides(), forward_params.local.o_strides = o.strides();
  forward_params.seqlen = c.seqlen;
  forward_params.layout = c.layout;
  ring_forward(forward_params, MPI_COMM_WORLD);
  bool untouched = true;
  EXPECT_EQ(Unpadded(o, &untouched).bytes, contiguous.o.bytes);
  EXPECT_EQ(0, std::memcmp(lse.data(), contiguous.lse.data(), lse.size() * sizeof(float)));

  const Gradients nan = NanGradients(c, s.q.seq, c.dtype);
  Gradients padded{Padded(nan.dq), Padded(nan.dk), Padded(nan.dv)};
  RingBackwardParams backward_params;
  backward_params.local.attention = forward_params.local;
  backward_params.local.d_o = d_o.data(), backward_params.local.do_strides = d_o.strides();
  backward_params.local.dq = padded.dq.data(), backward_params.local.dq_strides = padded.dq.strides();
  backward_params.local.dk = padded.dk.data(), backward_params.local.dk_strides = padded.dk.strides();
  backward_params.local.dv = padded.dv.data(), backward_params.local.dv_strides = padded.dv.strides();
  backward_params.seqlen = c.seqlen;
  backward_params.layout = c.layout;
  ring_backward(backward_params, MPI_COMM_WORLD);
  EXPECT_EQ(Unpadded(padded.dq, &untouched).bytes, contiguous_grads.dq.bytes);
  EXPECT_EQ(Unpadded(padded.dk, &untouched).bytes, contiguous_grads.dk.bytes);
  EXPECT_EQ(Unpadded(padded.dv, &untouched).bytes, contiguous_grads.dv.bytes);
  EXPECT_TRUE(untouched) << "a padding element was written";
}

// Which steps received a shard: contiguous causal sends rank r only the shards of ranks before it; a
// window narrower than a shard needs only the neighbour's; zigzag causal needs every shard.
TEST(Ring, SkipsTransfersNoRowNeeds) {
  const int rank = WorldRank(), world = WorldSize();
  struct Expectation {
    RingCase c;
    bool (*receives)(int rank, int step);  // does `rank` receive during `step` (for step + 1)
  };
  RingCase causal;
  causal.layout = ShardLayout::kContiguous, causal.causal = true, causal.seqlen = 200;
  RingCase window = causal;
  window.window_left = 3;
  RingCase zigzag = causal;
  zigzag.layout = ShardLayout::kZigzag;
  const Expectation expectations[] = {
      {causal, [](int r, int step) { return step + 1 <= r; }},
      {window, [](int r, int step) { return step == 0 && r >= 1; }},
      {zigzag, [](int, int) { return true; }},
  };
  for (const Expectation& e : expectations) {
    const GlobalProblem g(e.c, 3);
    const LocalShard s = ShardOf(g);
    RingForward(g, s);
    const std::vector<RingStepTiming> timings = last_ring_timings();
    ASSERT_EQ(timings.size(), static_cast<std::size_t>(world));
    for (int step = 0; step < world; ++step) {
      const bool expected = step + 1 < world && e.receives(rank, step);
      EXPECT_EQ(timings[step].bytes > 0, expected) << e.c.Name() << " rank " << rank << " step " << step;
      EXPECT_GE(timings[step].compute_seconds, 0.0);
      EXPECT_GE(timings[step].wait_seconds, 0.0);
      if (!expected) EXPECT_EQ(timings[step].bytes, 0);
    }
  }
}

}  // namespace
}  // namespace flashattn::distributed::testing
