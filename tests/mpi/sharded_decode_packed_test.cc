// sharded_decode with packed queries (cu_seqlens_q: 0, 1, 5 and 97 query rows mixed in one batch) against
// decode over the whole cache in one process: every rank builds the same global caches, keeps its
// consecutive part of each sequence (parts that do not divide evenly, ranks that hold no key of a sequence),
// and checks the merged result and where the new keys went.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
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
constexpr std::int64_t kHq = 4, kHkv = 2, kD = 32;
constexpr float kSlopes[kHq] = {0.5f, 0.25f, 0.125f, 0.0625f};
constexpr float kSinks[kHq] = {0.5f, -1.0f, 2.0f, -std::numeric_limits<float>::infinity()};
// Per sequence: its query rows and the keys cached before the call over all ranks.
const std::vector<std::int64_t> kRows = {0, 1, 5, 97, 1, 5};
const std::vector<std::int64_t> kKeys = {13, 29, 40, 150, 0, 23};
const std::int64_t kBatch = static_cast<std::int64_t>(kRows.size());
const std::int64_t kMaxRows = *std::max_element(kRows.begin(), kRows.end());

// Keys of sequence b on each rank, split by weights into uneven parts: every rank; every rank but rank 0;
// more on later ranks; none on the last rank (its tail is a middle rank); nobody (an empty sequence); the
// last rank only.
std::vector<std::int64_t> KeysPerRank(std::int64_t b, int world) {
  std::vector<std::int64_t> weights(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    const std::int64_t weight[] = {1, r > 0, r + 1, r < world - 1 ? r + 1 : 0, 1, r == world - 1};
    weights[r] = weight[b];
  }
  if (std::accumulate(weights.begin(), weights.end(), std::int64_t{0}) == 0) weights[0] = 1;
  const std::int64_t sum = std::accumulate(weights.begin(), weights.end(), std::int64_t{0});
  std::vector<std::int64_t> counts;
  std::int64_t cumulative = 0;
  for (int r = 0; r < world; ++r) {
    counts.push_back(kKeys[b] * (cumulative + weights[r]) / sum - kKeys[b] * cumulative / sum);
    cumulative += weights[r];
  }
  return counts;
}

std::vector<std::int32_t> CuSeqlensQ() {
  std::vector<std::int32_t> cu = {0};
  for (std::int64_t rows : kRows) cu.push_back(static_cast<std::int32_t>(cu.back() + rows));
  return cu;
}

struct PackedCase {
  std::int64_t page_size = 0;  // 0: a contiguous cache
  bool append = false;
  bool causal = false;
  std::int64_t window_left = -1, window_right = -1;
  bool rotary = false, alibi = false, sinks = false;

  std::string Name() const {
    std::ostringstream name;
    name << (page_size ? "paged " + std::to_string(page_size) : std::string("contiguous"))
         << (append ? " append" : "") << (causal ? " causal" : "") << " window=(" << window_left << ","
         << window_right << ")" << (rotary ? " rotary" : "") << (alibi ? " alibi" : "") << (sinks ? " sinks" : "");
    return name.str();
  }
};

// A float32 cache (contiguous (batch, capacity, Hkv, d), or pages of page_size rows in reverse order) that holds
// `counts[b]` rows of sequence b of the global tensors, from `starts[b]` on; NaN elsewhere.
struct PackedCache {
  std::int64_t capacity, page_size, max_pages;
  Tensor k, v;
  std::vector<std::int32_t> block_table;

  PackedCache(const Tensor& global_k, const Tensor& global_v, const std::vector<std::int64_t>& starts,
              const std::vector<std::int64_t>& counts, std::int64_t capacity, std::int64_t page_size)
      : capacity(capacity), page_size(page_size), max_pages(page_size ? (capacity + page_size - 1) / page_size : 0) {
    const std::int64_t blocks = page_size ? kBatch * max_pages : kBatch, rows = page_size ? page_size : capacity;
    k = NanTensor(blocks, rows, kHkv, kD, DType::kF32);
    v = NanTensor(blocks, rows, kHkv, kD, DType::kF32);
    for (std::int64_t page = 0; page < kBatch * max_pages; ++page)
      block_table.push_back(static_cast<std::int32_t>(kBatch * max_pages - 1 - page));
    for (std::int64_t b = 0; b < kBatch; ++b)
      for (std::int64_t j = 0; j < counts[b]; ++j) {
        const std::int64_t from = (b * global_k.seq + starts[b] + j) * RowBytes();
        std::memcpy(k.bytes.data() + Row(b, j) * RowBytes(), global_k.bytes.data() + from, RowBytes());
        std::memcpy(v.bytes.data() + Row(b, j) * RowBytes(), global_v.bytes.data() + from, RowBytes());
      }
  }

  static std::int64_t RowBytes() { return kHkv * kD * 4; }
  std::int64_t Row(std::int64_t b, std::int64_t j) const {
    if (!page_size) return b * capacity + j;
    return block_table[static_cast<std::size_t>(b * max_pages + j / page_size)] * page_size + j % page_size;
  }
  std::vector<std::byte> KeyRow(std::int64_t b, std::int64_t j) const {
    const std::byte* at = k.bytes.data() + Row(b, j) * RowBytes();
    return std::vector<std::byte>(at, at + RowBytes());
  }

  void Describe(DecodeParams& p) {
    p.k_cache = k.data(), p.v_cache = v.data();
    if (page_size) {
      p.block_table = block_table.data();
      p.block_table_stride = p.max_pages = max_pages;
      p.num_pages = kBatch * max_pages, p.page_size = page_size;
    } else {
      p.cache_seqlen_max = capacity;
    }
    p.cache_strides = k.strides();
  }
};

struct Rotary {
  std::int64_t dim = 16, max_pos = 256;
  std::vector<float> cos, sin;
  Rotary() {
    for (std::int64_t pos = 0; pos < max_pos; ++pos)
      for (std::int64_t c = 0; c < dim / 2; ++c) {
        const double angle = static_cast<double>(pos) * std::pow(100.0, -2.0 * static_cast<double>(c) / dim);
        cos.push_back(static_cast<float>(std::cos(angle)));
        sin.push_back(static_cast<float>(std::sin(angle)));
      }
  }
};

// Packed rows: o (1, total_q, Hq, d), lse (Hq, total_q).
struct PackedOutput {
  Tensor o;
  std::vector<float> lse;
  explicit PackedOutput(std::int64_t total_q)
      : o(NanTensor(1, total_q, kHq, kD, DType::kF32)), lse(static_cast<std::size_t>(kHq * total_q), kNaN) {}
};

// The packed decode call of `c` over `cache`: q (1, total_q, Hq, d), k_new and v_new (1, total_q, Hkv, d).
DecodeParams PackedCall(const PackedCase& c, const Tensor& q, const Tensor& k_new, const Tensor& v_new,
                        PackedCache& cache, const std::vector<std::int32_t>& counts,
                        const std::vector<std::int32_t>& cu_seqlens_q, PackedOutput& out, const Rotary& rotary) {
  DecodeParams p;
  p.q = q.data(), p.o = out.o.data(), p.lse = out.lse.data();
  if (c.append) p.k_new = k_new.data(), p.v_new = v_new.data();
  p.cache_seqlens = counts.data();
  p.cu_seqlens_q = cu_seqlens_q.data();
  p.batch = kBatch, p.seqlen_q = kMaxRows, p.seqlen_new = c.append ? kMaxRows : 0;
  p.heads_q = kHq, p.heads_kv = kHkv, p.head_dim = kD;
  p.causal = c.causal, p.window_left = c.window_left, p.window_right = c.window_right;
  if (c.alibi) p.alibi_slopes = kSlopes;
  if (c.sinks) p.sinks = kSinks;
  if (c.rotary) {
    p.rotary_cos = rotary.cos.data(), p.rotary_sin = rotary.sin.data();
    p.rotary_dim = rotary.dim, p.rotary_max_pos = rotary.max_pos;
  }
  p.num_threads = 1;
  cache.Describe(p);
  p.set_contiguous_strides();
  p.cache_strides = cache.k.strides();
  return p;
}

std::vector<PackedCase> PackedCases() {
  struct Mask {
    bool causal;
    std::int64_t left, right;
  };
  const Mask masks[] = {{false, -1, -1}, {true, -1, -1}, {false, 6, 1}, {true, 30, -1}};
  std::vector<PackedCase> cases;
  for (std::int64_t page_size : {0, 1, 16})
    for (bool append : {false, true})
      for (const Mask& mask : masks) {
        PackedCase c;
        c.page_size = page_size, c.append = append;
        c.causal = mask.causal, c.window_left = mask.left, c.window_right = mask.right;
        cases.push_back(c);
      }
  // Rotary embedding, ALiBi and sinks at global positions.
  for (bool append : {false, true}) {
    PackedCase c;
    c.page_size = 16, c.append = append, c.causal = true, c.rotary = true, c.alibi = !append, c.sinks = append;
    cases.push_back(c);
    c.page_size = 0, c.causal = false, c.window_left = 12, c.window_right = 0, c.rotary = false, c.alibi = true;
    c.sinks = !append;
    cases.push_back(c);
  }
  return cases;
}

TEST(ShardedDecodePacked, MatchesOneProcess) {
  const int rank = WorldRank(), world = WorldSize();
  const Rotary rotary;
  const std::vector<std::int32_t> cu_seqlens_q = CuSeqlensQ();
  const std::int64_t total_q = cu_seqlens_q.back(), longest = 150 + kMaxRows;
  std::vector<std::int64_t> all_rows(static_cast<std::size_t>(total_q));
  std::iota(all_rows.begin(), all_rows.end(), 0);
  std::uint64_t seed = 4100;
  for (const PackedCase& c : PackedCases()) {
    seed += 10;
    const Tensor global_k = RandomTensor(kBatch, longest, kHkv, kD, DType::kF32, seed);
    const Tensor global_v = RandomTensor(kBatch, longest, kHkv, kD, DType::kF32, seed + 1);
    const Tensor q = RandomTensor(1, total_q, kHq, kD, DType::kF32, seed + 2);
    const Tensor k_new = RandomTensor(1, total_q, kHkv, kD, DType::kF32, seed + 3);
    const Tensor v_new = RandomTensor(1, total_q, kHkv, kD, DType::kF32, seed + 4);
    const Shards shards = ShardsOf(kBatch, rank, [world](std::int64_t b) { return KeysPerRank(b, world); });
    const std::vector<std::int64_t> zeros(kBatch, 0), &totals = shards.total, &mine = shards.mine;

    PackedCache whole(global_k, global_v, zeros, totals, longest, c.page_size);
    const std::vector<std::int32_t> whole_counts(totals.begin(), totals.end());
    PackedOutput single(total_q);
    decode(PackedCall(c, q, k_new, v_new, whole, whole_counts, cu_seqlens_q, single, rotary));

    std::int64_t capacity = 1;
    for (std::int64_t b = 0; b < kBatch; ++b) capacity = std::max(capacity, mine[b] + kRows[b] + 1);
    PackedCache part(global_k, global_v, shards.before, mine, capacity, c.page_size);
    const PackedCache untouched = part;
    const std::vector<std::int32_t> part_counts(mine.begin(), mine.end());
    PackedOutput sharded(total_q);
    sharded_decode(PackedCall(c, q, k_new, v_new, part, part_counts, cu_seqlens_q, sharded, rotary), MPI_COMM_WORLD,
                   30);

    // Each sequence's own new rows went to its tail (rotated as one process rotates them), and nowhere else.
    for (std::int64_t b = 0; b < kBatch; ++b) {
      const std::int64_t appended_rows = c.append ? kRows[b] : 0;
      for (std::int64_t j = 0; j < part.capacity; ++j) {
        const bool appended = rank == shards.tail[b] && j >= mine[b] && j < mine[b] + appended_rows;
        EXPECT_EQ(part.KeyRow(b, j), appended ? whole.KeyRow(b, totals[b] + j - mine[b]) : untouched.KeyRow(b, j))
            << c.Name() << " rank " << rank << " sequence " << b << " row " << j;
      }
    }
    const double tolerance = 1e-5 * std::max(1.0, MaxAbs(single.o));
    EXPECT_LE(MaxOverRanks(MaxRowError(sharded.o, single.o, all_rows)), tolerance) << c.Name();
    EXPECT_LE(MaxOverRanks(MaxLseError(sharded.lse, single.lse)), 1e-5) << c.Name();
  }
}

TEST(ShardedDecodePacked, RanksThatDisagreeOnCuSeqlensQAllFail) {
  if (WorldSize() < 2) GTEST_SKIP() << "needs two ranks";
  const int rank = WorldRank(), world = WorldSize();
  const Rotary rotary;
  std::vector<std::int32_t> cu_seqlens_q = CuSeqlensQ();
  const std::int64_t total_q = cu_seqlens_q.back();
  const Tensor global_k = RandomTensor(kBatch, 150, kHkv, kD, DType::kF32, 7);
  const Tensor q = RandomTensor(1, total_q, kHq, kD, DType::kF32, 8);
  const Shards shards = ShardsOf(kBatch, rank, [world](std::int64_t b) { return KeysPerRank(b, world); });
  PackedCache part(global_k, global_k, shards.before, shards.mine, 160, 16);
  const PackedCache untouched = part;
  const std::vector<std::int32_t> counts(shards.mine.begin(), shards.mine.end());
  PackedOutput out(total_q);
  PackedCase c;
  c.page_size = 16, c.append = true;
  // The last rank moves a query row from sequence 3 to sequence 2: each rank's call is valid on its own.
  if (rank == world - 1) cu_seqlens_q[3] += 1;
  try {
    sharded_decode(PackedCall(c, q, q, q, part, counts, cu_seqlens_q, out, rotary), MPI_COMM_WORLD, 30);
    ADD_FAILURE() << "no Error on rank " << rank;
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("cu_seqlens_q[3]"), std::string::npos) << message;
    EXPECT_NE(message.find("rank " + std::to_string(world - 1)), std::string::npos) << message;
  }
  // Packed on some ranks only.
  DecodeParams call = PackedCall(c, q, q, q, part, counts, CuSeqlensQ(), out, rotary);
  if (rank == 0) {
    call.cu_seqlens_q = nullptr, call.seqlen_q = 1, call.seqlen_new = 1;
    call.set_contiguous_strides();
    call.cache_strides = part.k.strides();
  }
  try {
    sharded_decode(call, MPI_COMM_WORLD, 30);
    ADD_FAILURE() << "no Error on rank " << rank;
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("cu_seqlens_q given"), std::string::npos) << error.what();
  }
  EXPECT_EQ(part.k.bytes, untouched.k.bytes);
  for (float value : out.o.Floats()) EXPECT_TRUE(std::isnan(value));
  for (float value : out.lse) EXPECT_TRUE(std::isnan(value));
}

}  // namespace
}  // namespace flashattn::distributed::testing
