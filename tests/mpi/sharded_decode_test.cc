// sharded_decode against decode over the whole cache in one process and the float64 oracle: every rank
// builds the same global caches, keeps its consecutive part of each sequence, and checks the merged result
// and where the new keys went.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "flashattn/decode.h"
#include "flashattn/distributed.h"
#include "flashattn/flashattn.h"
#include "mpi_test_support.h"

namespace flashattn::distributed::testing {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr std::int64_t kBatch = 4, kHq = 4, kHkv = 2, kD = 40, kPageSize = 4;
constexpr float kSlopes[kHq] = {0.5f, 0.25f, 0.125f, 0.0625f};  // ALiBi's, per query head

struct DecodeCase {
  DType dtype = DType::kF32;                  // of q, k_new, v_new and o
  std::optional<DType> cache_dtype;           // unset: dtype
  DType CacheDType() const { return cache_dtype.value_or(dtype); }
  std::int64_t Nq = 1, Nnew = 0;
  bool causal = false;
  std::int64_t window_left = -1, window_right = -1;
  bool paged = false;
  bool rotary = false;
  float softcap = 0.0f;
  bool alibi = false;

  std::string Name() const {
    std::ostringstream name;
    name << to_string(dtype) << " cache " << to_string(CacheDType()) << " Nq=" << Nq << " Nnew=" << Nnew << (causal ? " causal" : "") << " window=("
         << window_left << "," << window_right << ")" << (paged ? " paged" : "") << (rotary ? " rotary" : "")
         << (softcap > 0 ? " softcap" : "") << (alibi ? " alibi" : "");
    return name.str();
  }
};

// Keys of sequence b before the call: 37 spread over every rank, 5 on rank 0 only, none at all, and 20
// on every rank but the last (the tail is then a middle rank).
std::vector<std::int64_t> KeysPerRank(std::int64_t b, int world) {
  std::vector<std::int64_t> counts(static_cast<std::size_t>(world), 0);
  const std::int64_t totals[kBatch] = {37, 5, 0, 20};
  const int holders = b == 0 ? world : b == 1 ? 1 : b == 2 ? 0 : std::max(1, world - 1);
  for (int r = 0; r < holders; ++r) counts[r] = totals[b] * (r + 1) / holders - totals[b] * r / holders;
  return counts;
}

// A cache (contiguous (batch, capacity, Hkv, d), or paged with kPageSize and pages in reverse order) that
// holds `keys[b]` given rows of sequence b, NaN elsewhere.
struct Cache {
  std::int64_t capacity = 0;
  bool paged = false;
  Tensor k, v;  // contiguous: (batch, capacity, Hkv, d); paged: (num_pages, kPageSize, Hkv, d)
  std::vector<std::int32_t> block_table;
  std::int64_t max_pages = 0;

  Cache(const Tensor& global_k, const Tensor& global_v, const std::vector<std::int64_t>& starts,
        const std::vector<std::int64_t>& counts, std::int64_t capacity, bool paged)
      : capacity(capacity), paged(paged) {
    max_pages = (capacity + kPageSize - 1) / kPageSize;
    const std::int64_t rows = paged ? kPageSize : capacity, blocks = paged ? kBatch * max_pages : kBatch;
    k = NanTensor(blocks, rows, kHkv, kD, global_k.dtype);
    v = NanTensor(blocks, rows, kHkv, kD, global_k.dtype);
    for (std::int64_t b = 0; b < kBatch; ++b)
      for (std::int64_t p = 0; p < max_pages; ++p)
        block_table.push_back(static_cast<std::int32_t>(kBatch * max_pages - 1 - (b * max_pages + p)));
    const std::size_t row_bytes = static_cast<std::size_t>(kHkv * kD) * size_of(global_k.dtype);
    for (std::int64_t b = 0; b < kBatch; ++b)
      for (std::int64_t j = 0; j < counts[b]; ++j) {
        const std::int64_t from = (b * global_k.seq + starts[b] + j) * static_cast<std::int64_t>(row_bytes);
        std::memcpy(k.bytes.data() + Row(b, j) * row_bytes, global_k.bytes.data() + from, row_bytes);
        std::memcpy(v.bytes.data() + Row(b, j) * row_bytes, global_v.bytes.data() + from, row_bytes);
      }
  }

  // Index of key row j of sequence b among the cache's rows.
  std::int64_t Row(std::int64_t b, std::int64_t j) const {
    if (!paged) return b * capacity + j;
    return block_table[static_cast<std::size_t>(b * max_pages + j / kPageSize)] * kPageSize + j % kPageSize;
  }
  std::vector<std::byte> KeyRow(std::int64_t b, std::int64_t j) const {
    const std::size_t row_bytes = static_cast<std::size_t>(kHkv * kD) * size_of(k.dtype);
    const std::byte* at = k.bytes.data() + Row(b, j) * static_cast<std::int64_t>(row_bytes);
    return std::vector<std::byte>(at, at + row_bytes);
  }

  void Describe(DecodeParams& p) {
    p.k_cache = k.data();
    p.v_cache = v.data();
    p.cache_strides = k.strides();
    if (paged) {
      p.block_table = block_table.data();
      p.block_table_stride = max_pages;
      p.max_pages = max_pages;
      p.num_pages = kBatch * max_pages;
      p.page_size = kPageSize;
    } else {
      p.cache_seqlen_max = capacity;
    }
  }
};

struct Rotary {
  std::int64_t dim = 16, max_pos = 128;
  std::vector<float> cos, sin;
  Rotary() {
    for (std::int64_t pos = 0; pos < max_pos; ++pos)
      for (std::int64_t c = 0; c < dim / 2; ++c) {
        const double angle =
            static_cast<double>(pos) * std::pow(100.0, -2.0 * static_cast<double>(c) / static_cast<double>(dim));
        cos.push_back(static_cast<float>(std::cos(angle)));
        sin.push_back(static_cast<float>(std::sin(angle)));
      }
  }
};

struct DecodeOutput {
  Tensor o;
  std::vector<float> lse;
};

// The decode call of `c` over `cache` with per-sequence key counts `counts`.
DecodeParams DecodeCall(const DecodeCase& c, const Tensor& q, const Tensor& k_new, const Tensor& v_new, Cache& cache,
                        const std::vector<std::int32_t>& counts, DecodeOutput& out, const Rotary& rotary) {
  DecodeParams p;
  p.q = q.data();
  p.k_new = c.Nnew > 0 ? k_new.data() : nullptr;
  p.v_new = c.Nnew > 0 ? v_new.data() : nullptr;
  p.o = out.o.data();
  p.lse = out.lse.data();
  p.cache_seqlens = counts.data();
  p.batch = kBatch, p.seqlen_q = c.Nq, p.seqlen_new = c.Nnew, p.heads_q = kHq, p.heads_kv = kHkv, p.head_dim = kD;
  p.dtype = c.dtype;
  p.cache_dtype = c.CacheDType();
  p.causal = c.causal, p.window_left = c.window_left, p.window_right = c.window_right, p.softcap = c.softcap;
  if (c.alibi) p.alibi_slopes = kSlopes;
  p.num_threads = 1;
  p.set_contiguous_strides();
  cache.Describe(p);
  p.cache_strides = cache.k.strides();
  if (c.rotary) {
    p.rotary_cos = rotary.cos.data(), p.rotary_sin = rotary.sin.data();
    p.rotary_dim = rotary.dim, p.rotary_max_pos = rotary.max_pos;
  }
  return p;
}

DecodeOutput NanOutput(const DecodeCase& c, DType dtype) {
  return {NanTensor(kBatch, c.Nq, kHq, kD, dtype),
          std::vector<float>(static_cast<std::size_t>(kBatch * kHq * c.Nq), kNaN)};
}

std::vector<DecodeCase> DecodeCases() {
  std::vector<DecodeCase> cases;
  struct Mask {
    bool causal;
    std::int64_t left, right;
  };
  const Mask masks[] = {{false, -1, -1}, {true, -1, -1}, {false, 6, 1}, {true, 10, -1}};
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16})
    for (const Mask& mask : masks)
      for (std::int64_t Nq : {1, 3})
        for (std::int64_t Nnew : {0, 2}) {
          DecodeCase c;
          c.dtype = dtype, c.causal = mask.causal, c.window_left = mask.left, c.window_right = mask.right;
          c.Nq = Nq, c.Nnew = Nnew;
          cases.push_back(c);
        }
  for (bool rotary : {false, true})
    for (const Mask& mask : masks) {
      DecodeCase c;
      c.paged = true, c.rotary = rotary, c.Nq = 3, c.Nnew = 2, c.softcap = rotary ? 0.0f : 3.0f;
      c.causal = mask.causal, c.window_left = mask.left, c.window_right = mask.right;
      cases.push_back(c);
    }
  // A cache of another float type than the queries' (float32 queries over float16, as llama.cpp runs them;
  // bfloat16 over float32), contiguous, so that a call that starts at a later sequence finds it by the
  // cache's element size.
  for (const auto& [dtype, cache_dtype] : {std::pair{DType::kF32, DType::kF16}, std::pair{DType::kBF16, DType::kF32}})
    for (std::int64_t Nnew : {0, 2}) {
      DecodeCase c;
      c.dtype = dtype, c.cache_dtype = cache_dtype, c.Nq = 3, c.Nnew = Nnew, c.causal = true;
      cases.push_back(c);
    }
  // ALiBi at global positions: every mask, appending or not, and paged with softcap.
  for (const Mask& mask : masks)
    for (std::int64_t Nnew : {0, 2}) {
      DecodeCase c;
      c.alibi = true, c.Nq = 3, c.Nnew = Nnew, c.paged = Nnew > 0, c.softcap = Nnew > 0 ? 3.0f : 0.0f;
      c.causal = mask.causal, c.window_left = mask.left, c.window_right = mask.right;
      cases.push_back(c);
    }
  return cases;
}

TEST(ShardedDecode, MatchesOneProcessAndTheOracle) {
  const int rank = WorldRank(), world = WorldSize();
  const Rotary rotary;
  std::uint64_t seed = 900;
  for (const DecodeCase& c : DecodeCases()) {
    seed += 10;
    const std::int64_t longest = 37 + c.Nnew;
    const Tensor global_k = RandomTensor(kBatch, longest, kHkv, kD, c.CacheDType(), seed);
    const Tensor global_v = RandomTensor(kBatch, longest, kHkv, kD, c.CacheDType(), seed + 1);
    const Tensor q = RandomTensor(kBatch, c.Nq, kHq, kD, c.dtype, seed + 2);
    const Tensor k_new = RandomTensor(kBatch, c.Nnew, kHkv, kD, c.dtype, seed + 3);
    const Tensor v_new = RandomTensor(kBatch, c.Nnew, kHkv, kD, c.dtype, seed + 4);
    const Shards shards = ShardsOf(kBatch, rank, [world](std::int64_t b) { return KeysPerRank(b, world); });
    const std::vector<std::int64_t> zeros(kBatch, 0), &totals = shards.total, &mine = shards.mine;

    // One process over the whole cache.
    Cache whole(global_k, global_v, zeros, totals, longest, c.paged);
    const std::vector<std::int32_t> whole_counts(totals.begin(), totals.end());
    DecodeOutput single = NanOutput(c, c.dtype);
    decode(DecodeCall(c, q, k_new, v_new, whole, whole_counts, single, rotary));

    // This rank's part.
    Cache part(global_k, global_v, shards.before, mine, 37 / std::max(1, world - 1) + c.Nnew + 2, c.paged);
    const Cache untouched = part;
    const std::vector<std::int32_t> part_counts(mine.begin(), mine.end());
    DecodeOutput ring = NanOutput(c, c.dtype);
    sharded_decode(DecodeCall(c, q, k_new, v_new, part, part_counts, ring, rotary), MPI_COMM_WORLD, 30);

    // The new keys went to the tail (rotated as one process rotates them), and nowhere else.
    for (std::int64_t b = 0; b < kBatch; ++b) {
      for (std::int64_t j = 0; j < part.capacity; ++j) {
        const bool appended = rank == shards.tail[b] && j >= mine[b] && j < mine[b] + c.Nnew;
        EXPECT_EQ(part.KeyRow(b, j), appended ? whole.KeyRow(b, totals[b] + j - mine[b]) : untouched.KeyRow(b, j))
            << c.Name() << " rank " << rank << " sequence " << b << " row " << j;
      }
    }

    // Errors against the oracle: attention of the queries (the last rows) over the whole sequence.
    std::vector<std::int64_t> rows(static_cast<std::size_t>(c.Nq));
    for (std::int64_t i = 0; i < c.Nq; ++i) rows[static_cast<std::size_t>(i)] = i;
    if (c.rotary) {
      // The oracle has no rotary embedding: one process's decode is the reference.
      const double tolerance = (c.dtype == DType::kF32 ? 1e-5 : 1e-2) * std::max(1.0, MaxAbs(single.o));
      EXPECT_LE(MaxOverRanks(MaxRowError(ring.o, single.o, rows)), tolerance) << c.Name();
      EXPECT_LE(MaxOverRanks(MaxLseError(ring.lse, single.lse)), 1e-4) << c.Name();
      continue;
    }
    DecodeOutput oracle = NanOutput(c, DType::kF32);
    for (std::int64_t b = 0; b < kBatch; ++b) {
      const std::int64_t keys = totals[b] + c.Nnew;
      Tensor k(1, keys, kHkv, kD, DType::kF32), v(1, keys, kHkv, kD, DType::kF32), qb(1, c.Nq, kHq, kD, DType::kF32);
      std::vector<float> k_rows, v_rows;
      for (std::int64_t j = 0; j < keys; ++j) {
        const std::int64_t row = whole.Row(b, j);
        for (std::int64_t e = 0; e < kHkv * kD; ++e) {
          k_rows.push_back(whole.k.At(0, row, 0, e));
          v_rows.push_back(whole.v.At(0, row, 0, e));
        }
      }
      k.Assign(k_rows);
      v.Assign(v_rows);
      std::vector<float> q_rows = q.Floats();
      qb.Assign(std::vector<float>(q_rows.begin() + b * c.Nq * kHq * kD, q_rows.begin() + (b + 1) * c.Nq * kHq * kD));
      AttentionParams p;
      p.q = qb.data(), p.k = k.data(), p.v = v.data();
      p.o = static_cast<float*>(oracle.o.data()) + b * c.Nq * kHq * kD;
      p.lse = oracle.lse.data() + b * kHq * c.Nq;
      p.seqlen_q = c.Nq, p.seqlen_k = keys, p.heads_q = kHq, p.heads_kv = kHkv, p.head_dim = kD;
      p.causal = c.causal, p.window_left = c.window_left, p.window_right = c.window_right, p.softcap = c.softcap;
      if (c.alibi) p.alibi_slopes = kSlopes;
      p.set_contiguous_strides();
      forward(p, Algorithm::kOracle);
    }
    const double single_o = MaxRowError(single.o, oracle.o, rows);
    const double ring_o = MaxOverRanks(MaxRowError(ring.o, oracle.o, rows));
    // A partial of a float16/bfloat16 cache comes back from decode rounded to that type: the merged result
    // carries at most one more rounding than one process's, within the factor 2.
    EXPECT_LE(ring_o, 2.0 * single_o + 1e-5 * std::max(1.0, MaxAbs(oracle.o))) << c.Name() << " single " << single_o;
    EXPECT_LE(MaxOverRanks(MaxLseError(ring.lse, oracle.lse)), 2.0 * MaxLseError(single.lse, oracle.lse) + 1e-5)
        << c.Name();
  }
}

TEST(ShardedDecode, RunsAreBitwiseIdenticalAndEveryRankGetsTheSameResult) {
  DecodeCase c;
  c.dtype = DType::kBF16, c.Nq = 2, c.causal = true;
  const int rank = WorldRank(), world = WorldSize();
  const Rotary rotary;
  const Tensor global_k = RandomTensor(kBatch, 37, kHkv, kD, c.dtype, 1);
  const Tensor global_v = RandomTensor(kBatch, 37, kHkv, kD, c.dtype, 2);
  const Tensor q = RandomTensor(kBatch, c.Nq, kHq, kD, c.dtype, 3);
  const Shards shards = ShardsOf(kBatch, rank, [world](std::int64_t b) { return KeysPerRank(b, world); });
  Cache part(global_k, global_v, shards.before, shards.mine, 40, false);
  const std::vector<std::int32_t> counts(shards.mine.begin(), shards.mine.end());
  DecodeOutput first = NanOutput(c, c.dtype), second = NanOutput(c, c.dtype);
  sharded_decode(DecodeCall(c, q, q, q, part, counts, first, rotary), MPI_COMM_WORLD);
  sharded_decode(DecodeCall(c, q, q, q, part, counts, second, rotary), MPI_COMM_WORLD);
  EXPECT_EQ(first.o.bytes, second.o.bytes);
  std::vector<std::byte> rank0 = first.o.bytes;
  MPI_Bcast(rank0.data(), static_cast<int>(rank0.size()), MPI_BYTE, 0, MPI_COMM_WORLD);
  EXPECT_EQ(first.o.bytes, rank0) << "rank " << rank << " merged a different result than rank 0";
}

TEST(ShardedDecode, BadInputOnOneRankFailsEveryRank) {
  const int rank = WorldRank(), last = WorldSize() - 1;
  DecodeCase c;
  c.Nnew = 1;
  const Rotary rotary;
  const Tensor global_k = RandomTensor(kBatch, 38, kHkv, kD, c.dtype, 1);
  const Tensor q = RandomTensor(kBatch, 1, kHq, kD, c.dtype, 3);
  std::vector<std::int64_t> starts(kBatch, 0), mine(kBatch, 1);
  Cache part(global_k, global_k, starts, mine, 4, false);
  const Cache untouched = part;
  const std::vector<std::int32_t> counts(mine.begin(), mine.end());
  DecodeOutput out = NanOutput(c, c.dtype);
  DecodeParams call = DecodeCall(c, q, q, q, part, counts, out, rotary);
  // The last rank holds every sequence's tail but passes no new keys: caught after the counts are known,
  // before anything is appended anywhere.
  if (rank == last) call.k_new = nullptr;
  try {
    sharded_decode(call, MPI_COMM_WORLD);
    ADD_FAILURE() << "no Error on rank " << rank;
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("invalid input on rank " + std::to_string(last)), std::string::npos)
        << error.what();
  }
  EXPECT_EQ(part.k.bytes, untouched.k.bytes);
  for (float value : out.o.Floats()) EXPECT_TRUE(std::isnan(value));

  DecodeParams disagreeing = DecodeCall(c, q, q, q, part, counts, out, rotary);
  if (rank == last) disagreeing.causal = true;
  if (WorldSize() > 1) {
    EXPECT_THROW(sharded_decode(disagreeing, MPI_COMM_WORLD), Error);
  }

  // A quantized cache whose scales the last rank leaves out, and ranks that disagree on the scale groups: every
  // rank throws (naming the rank, or the field), with nothing written.
  std::vector<float> scales(static_cast<std::size_t>(kBatch * 4 * kHkv * (kD / 8)), 1.0f);
  DecodeParams quantized = DecodeCall(c, q, q, q, part, counts, out, rotary);
  quantized.cache_element = CacheElement::kInt8;
  quantized.k_scale = quantized.v_scale = rank == last ? nullptr : scales.data();
  try {
    sharded_decode(quantized, MPI_COMM_WORLD);
    ADD_FAILURE() << "no Error for missing scales on rank " << rank;
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("invalid input on rank " + std::to_string(last)), std::string::npos)
        << error.what();
  }
  quantized.k_scale = quantized.v_scale = scales.data();
  if (rank == last) quantized.scale_group_size = 8, quantized.set_contiguous_strides();
  if (WorldSize() > 1) {
    try {
      sharded_decode(quantized, MPI_COMM_WORLD);
      ADD_FAILURE() << "no Error for ranks that disagree on scale_group_size, on rank " << rank;
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("scale_group_size"), std::string::npos) << error.what();
    }
  }
  EXPECT_EQ(part.k.bytes, untouched.k.bytes);
  for (float value : out.o.Floats()) EXPECT_TRUE(std::isnan(value));
}

}  // namespace
}  // namespace flashattn::distributed::testing
