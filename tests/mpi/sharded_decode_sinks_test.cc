// sharded_decode with attention sinks and MLA shapes (dv ≠ d, V read inside the K cache) against decode over
// the whole cache in one process: every rank builds the same global cache, keeps its consecutive part of each
// sequence, and checks the merged result. The sinks join once, after the ranks' partials are merged.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "flashattn/decode.h"
#include "flashattn/distributed.h"
#include "flashattn/flashattn.h"
#include "mpi_test_support.h"

namespace flashattn::distributed::testing {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr std::int64_t kBatch = 4;

struct SinkCase {
  DType dtype = DType::kF32;
  std::int64_t Hq = 4, Hkv = 2, d = 40, dv = 40;
  bool values_in_keys = false;  // v_cache == k_cache: V is the first dv features of each K row
  std::int64_t longest = 97;    // keys of sequence 0 before the call
  std::int64_t Nq = 1, Nnew = 0;
  bool causal = false;
  std::vector<float> sinks;  // one per query head, or none

  std::string Name() const {
    std::ostringstream name;
    name << to_string(dtype) << " Hq=" << Hq << " Hkv=" << Hkv << " d=" << d << " dv=" << dv
         << (values_in_keys ? " V in K" : "") << " N=" << longest << " Nq=" << Nq << " Nnew=" << Nnew
         << (causal ? " causal" : "") << " sinks={";
    for (float sink : sinks) name << sink << ",";
    name << "} W=" << WorldSize();
    return name.str();
  }
};

// Keys of sequence b on each rank before the call: `longest` spread unevenly over every rank, 5 on rank 0
// only (the other ranks hold none of it), none at all, and longest − 16 on every rank but the last.
std::vector<std::int64_t> KeysPerRank(std::int64_t b, std::int64_t longest, int world) {
  std::vector<std::int64_t> counts(static_cast<std::size_t>(world), 0);
  const std::int64_t totals[kBatch] = {longest, std::min<std::int64_t>(5, longest), 0,
                                       std::max<std::int64_t>(0, longest - 16)};
  const int holders = b == 0 ? world : b == 1 ? 1 : b == 2 ? 0 : std::max(1, world - 1);
  for (int r = 0; r < holders; ++r) counts[r] = totals[b] * (r + 1) / holders - totals[b] * r / holders;
  return counts;
}

// Rows [starts[b], starts[b] + counts[b]) of each sequence of `global`, at the start of a cache of
// `capacity` rows per sequence (NaN elsewhere).
Tensor CachePart(const Tensor& global, const std::vector<std::int64_t>& starts, const std::vector<std::int64_t>& counts,
                 std::int64_t capacity) {
  Tensor part = NanTensor(kBatch, capacity, global.heads, global.dim, global.dtype);
  const std::size_t row_bytes = static_cast<std::size_t>(global.heads * global.dim) * size_of(global.dtype);
  for (std::int64_t b = 0; b < kBatch; ++b)
    std::memcpy(part.bytes.data() + b * capacity * static_cast<std::int64_t>(row_bytes),
                global.bytes.data() + (b * global.seq + starts[b]) * static_cast<std::int64_t>(row_bytes),
                static_cast<std::size_t>(counts[b]) * row_bytes);
  return part;
}

// The inputs every rank draws alike. Both caches are (batch, keys, Hkv, d): a separate V cache uses the first
// dv features of each head (the cache strides describe K and V alike); with V in K it is not used.
struct Problem {
  SinkCase c;
  Tensor k, v, q, k_new, v_new;
  Problem(const SinkCase& c, std::uint64_t seed)
      : c(c),
        k(RandomTensor(kBatch, c.longest + c.Nnew, c.Hkv, c.d, c.dtype, seed)),
        v(RandomTensor(kBatch, c.longest + c.Nnew, c.Hkv, c.d, c.dtype, seed + 1)),
        q(RandomTensor(kBatch, c.Nq, c.Hq, c.d, c.dtype, seed + 2)),
        k_new(RandomTensor(kBatch, c.Nnew, c.Hkv, c.d, c.dtype, seed + 3)),
        v_new(RandomTensor(kBatch, c.Nnew, c.Hkv, c.d, c.dtype, seed + 4)) {}
};

struct Output {
  Tensor o;
  std::vector<float> lse;
  explicit Output(const SinkCase& c)
      : o(NanTensor(kBatch, c.Nq, c.Hq, c.dv, c.dtype)), lse(static_cast<std::size_t>(kBatch * c.Hq * c.Nq), kNaN) {}
};

DecodeParams Call(const Problem& g, Tensor& k_cache, Tensor& v_cache, const std::vector<std::int32_t>& counts,
                  Output& out) {
  const SinkCase& c = g.c;
  DecodeParams p;
  p.q = g.q.data();
  p.k_cache = k_cache.data();
  p.v_cache = c.values_in_keys ? k_cache.data() : v_cache.data();
  p.k_new = c.Nnew > 0 ? g.k_new.data() : nullptr;
  p.v_new = c.Nnew > 0 && !c.values_in_keys ? g.v_new.data() : nullptr;
  p.o = out.o.data();
  p.lse = out.lse.data();
  p.cache_seqlens = counts.data();
  p.batch = kBatch, p.seqlen_q = c.Nq, p.seqlen_new = c.Nnew, p.heads_q = c.Hq, p.heads_kv = c.Hkv;
  p.head_dim = c.d, p.head_dim_v = c.dv;
  p.dtype = p.cache_dtype = c.dtype;
  p.causal = c.causal;
  p.sinks = c.sinks.empty() ? nullptr : c.sinks.data();
  p.num_threads = 1;
  p.cache_seqlen_max = k_cache.seq;
  p.set_contiguous_strides();
  p.new_strides = g.k_new.strides();
  return p;
}

// This rank's part of every sequence, decoded by sharded_decode.
Output Sharded(const Problem& g) {
  const int rank = WorldRank(), world = WorldSize();
  std::vector<std::int64_t> before, mine;
  for (std::int64_t b = 0; b < kBatch; ++b) {
    const std::vector<std::int64_t> counts = KeysPerRank(b, g.c.longest, world);
    std::int64_t sum = 0;
    for (int r = 0; r < rank; ++r) sum += counts[r];
    before.push_back(sum);
    mine.push_back(counts[rank]);
  }
  const std::int64_t capacity = g.c.longest + g.c.Nnew;
  Tensor k = CachePart(g.k, before, mine, capacity), v = CachePart(g.v, before, mine, capacity);
  const std::vector<std::int32_t> counts(mine.begin(), mine.end());
  Output out(g.c);
  sharded_decode(Call(g, k, v, counts, out), MPI_COMM_WORLD, 30);
  return out;
}

// One process over the whole cache.
Output Single(const Problem& g) {
  std::vector<std::int64_t> zeros(kBatch, 0), totals;
  for (std::int64_t b = 0; b < kBatch; ++b) {
    const std::vector<std::int64_t> counts = KeysPerRank(b, g.c.longest, WorldSize());
    std::int64_t sum = 0;
    for (std::int64_t count : counts) sum += count;
    totals.push_back(sum);
  }
  const std::int64_t capacity = g.c.longest + g.c.Nnew;
  Tensor k = CachePart(g.k, zeros, totals, capacity), v = CachePart(g.v, zeros, totals, capacity);
  const std::vector<std::int32_t> counts(totals.begin(), totals.end());
  Output out(g.c);
  decode(Call(g, k, v, counts, out));
  return out;
}

std::vector<SinkCase> Cases() {
  std::vector<SinkCase> cases;
  // GQA, causal or not, one and three query rows, appending or not; a −∞ sink and a large positive one.
  for (DType dtype : {DType::kF32, DType::kBF16})
    for (bool causal : {false, true})
      for (std::int64_t Nq : {1, 3}) {
        SinkCase c;
        c.dtype = dtype, c.causal = causal, c.Nq = Nq, c.Nnew = Nq == 3 ? 2 : 0, c.longest = causal ? 97 : 113;
        c.sinks = {0.5f, -INFINITY, 30.0f, -2.0f};
        cases.push_back(c);
      }
  // MLA shapes: d = 576 with dv = 512 read inside the K cache at a small length (with and without sinks,
  // appending the new keys once), and a separate V cache with dv < d.
  for (std::int64_t Nnew : {0, 1})
    for (bool sinks : {false, true}) {
      SinkCase mla;
      mla.Hq = 2, mla.Hkv = 1, mla.d = 576, mla.dv = 512, mla.values_in_keys = true, mla.longest = 13;
      mla.Nnew = Nnew, mla.Nq = Nnew > 0 ? 1 : 2, mla.causal = true;
      if (sinks) mla.sinks = {1.0f, -INFINITY};
      cases.push_back(mla);
    }
  SinkCase narrow_v;
  narrow_v.d = 59, narrow_v.dv = 24, narrow_v.Hq = 3, narrow_v.Hkv = 1, narrow_v.sinks = {-1.0f, 2.0f, 0.0f};
  cases.push_back(narrow_v);
  return cases;
}

TEST(ShardedDecode, SinksAndValueHeadDimMatchOneProcess) {
  std::uint64_t seed = 4000;
  for (const SinkCase& c : Cases()) {
    const Problem g(c, seed += 10);
    const Output single = Single(g), sharded = Sharded(g);
    std::vector<std::int64_t> rows(static_cast<std::size_t>(c.Nq));
    for (std::int64_t i = 0; i < c.Nq; ++i) rows[static_cast<std::size_t>(i)] = i;
    const double tolerance = (c.dtype == DType::kF32 ? 1e-5 : 1e-2) * std::max(1.0, MaxAbs(single.o));
    EXPECT_LE(MaxOverRanks(MaxRowError(sharded.o, single.o, rows)), tolerance) << c.Name();
    EXPECT_LE(MaxOverRanks(MaxLseError(sharded.lse, single.lse)), 1e-4) << c.Name();
    // Sequence 2 has no key anywhere: O = 0 and LSE = s_h, from the sink alone.
    for (std::int64_t h = 0; h < c.Hq && c.Nnew == 0; ++h) {
      const float expected = c.sinks.empty() ? -INFINITY : c.sinks[static_cast<std::size_t>(h)];
      EXPECT_EQ(sharded.lse[static_cast<std::size_t>((2 * c.Hq + h) * c.Nq)], expected) << c.Name() << " head " << h;
      EXPECT_EQ(sharded.o.At(2, 0, h, 0), 0.0f) << c.Name() << " head " << h;
    }
  }
}

// Sinks of −∞ are no sinks: the same bits as without them.
TEST(ShardedDecode, MinusInfinitySinksChangeNoBit) {
  for (bool values_in_keys : {false, true}) {
    SinkCase none;
    none.dtype = DType::kF16, none.Nq = 2, none.causal = true, none.values_in_keys = values_in_keys;
    if (values_in_keys) none.d = 64, none.dv = 48;
    SinkCase minus_infinity = none;
    minus_infinity.sinks.assign(static_cast<std::size_t>(none.Hq), -INFINITY);
    const Output plain = Sharded(Problem(none, 8)), sunk = Sharded(Problem(minus_infinity, 8));
    EXPECT_EQ(plain.o.bytes, sunk.o.bytes) << minus_infinity.Name();
    EXPECT_EQ(0, std::memcmp(plain.lse.data(), sunk.lse.data(), plain.lse.size() * sizeof(float)))
        << minus_infinity.Name();
  }
}

// Runs sharded_decode with this rank's `sinks` and expects every rank to throw an Error holding `part`, with
// the output untouched.
void ExpectSinkError(const std::vector<float>& sinks, const std::string& part) {
  SinkCase c;
  c.sinks = sinks;
  const Problem g(c, 12);
  try {
    Sharded(g);
    ADD_FAILURE() << "no Error on rank " << WorldRank() << " (" << part << ")";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(part), std::string::npos) << error.what();
  }
}

TEST(ShardedDecode, BadSinksOnOneRankFailEveryRank) {
  const int last = WorldSize() - 1;
  const bool odd_one = WorldRank() == last;
  const std::vector<float> sinks = {0.5f, -1.0f, 2.0f, 0.0f};
  std::vector<float> nan = sinks;
  if (odd_one) nan[2] = kNaN;
  ExpectSinkError(nan, "invalid input on rank " + std::to_string(last) + ": sinks must be finite or -inf");
  if (WorldSize() < 2) return;
  std::vector<float> other = sinks;
  if (odd_one) other[1] = -1.5f;
  ExpectSinkError(other, "sharded_decode: the ranks disagree on sinks[1] (-1 on rank");
  ExpectSinkError(odd_one ? std::vector<float>{} : sinks, "disagree on sinks given");
}

}  // namespace
}  // namespace flashattn::distributed::testing
