// sharded_decode over int8, FP8 E4M3 and FP8 E5M2 caches against decode over the whole quantized cache in one process:
// every rank quantizes the same global values (quantize_kv), keeps its consecutive rows of each sequence with
// their per-token scales, and checks the merged result and the rows and scales the tail rank appends.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "flashattn/decode.h"
#include "flashattn/distributed.h"
#include "mpi_test_support.h"

namespace flashattn::distributed::testing {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr std::int64_t kBatch = 3, kHq = 4, kHkv = 2, kD = 48, kNq = 2, kPageSize = 4;

struct QuantCase {
  CacheElement element = CacheElement::kInt8;
  ScaleGranularity granularity = ScaleGranularity::kPerToken;
  std::int64_t group_size = 0;
  std::int64_t dv = 0;  // > 0: V is the first dv features of the K rows
  bool paged = false;
  std::int64_t Nnew = 0;
  bool integer_scores = false, integer_pv = false;

  std::int64_t Dv() const { return dv > 0 ? dv : kD; }
  std::int64_t ScalesPerRow() const {  // per token: per K/V head and group
    return granularity != ScaleGranularity::kPerToken ? 0 : kHkv * (group_size > 0 ? kD / group_size : 1);
  }
  std::string Name() const {
    std::ostringstream name;
    name << to_string(element) << " " << to_string(granularity) << " g=" << group_size << (paged ? " paged" : "")
         << " Nnew=" << Nnew << (dv > 0 ? " V inside K dv=" + std::to_string(dv) : "")
         << (integer_scores ? " integer scores" : "") << (integer_pv ? " integer P̃V" : "");
    return name.str();
  }
};

// Keys of sequence b before the call: 37 over every rank, 5 on rank 0 only, none at all.
std::vector<std::int64_t> KeysPerRank(std::int64_t b, int world) {
  std::vector<std::int64_t> counts(static_cast<std::size_t>(world), 0);
  const std::int64_t totals[kBatch] = {37, 5, 0};
  const int holders = b == 0 ? world : b == 1 ? 1 : 0;
  for (int r = 0; r < holders; ++r) counts[r] = totals[b] * (r + 1) / holders - totals[b] * r / holders;
  return counts;
}

// The global cache: float32 values of every sequence's rows quantized by quantize_kv, (kBatch, rows, Hkv, d).
struct GlobalCache {
  std::int64_t rows = 0;
  std::vector<std::uint8_t> k, v;
  std::vector<float> k_scale, v_scale;

  GlobalCache(const QuantCase& c, std::int64_t rows, std::uint64_t seed) : rows(rows) {
    QuantizeParams q;
    q.outer = kBatch, q.seqlen = rows, q.heads = kHkv, q.head_dim = kD;
    q.element = c.element, q.granularity = c.granularity, q.group_size = c.group_size;
    q.set_contiguous_strides();
    const std::int64_t scales = c.ScalesPerRow() > 0 ? kBatch * rows * c.ScalesPerRow()
                                : c.granularity == ScaleGranularity::kPerHead ? kHkv
                                                                              : 1;
    for (auto [values, scale, tensor_seed] : {std::tuple{&k, &k_scale, seed}, std::tuple{&v, &v_scale, seed + 1}}) {
      const Tensor x = RandomTensor(kBatch, rows, kHkv, kD, DType::kF32, tensor_seed);
      values->resize(static_cast<std::size_t>(x.Elements()));
      scale->resize(static_cast<std::size_t>(scales));
      q.x = x.data(), q.values = values->data(), q.scales = scale->data();
      quantize_kv(q);
    }
  }
};

// A cache (contiguous (batch, capacity, Hkv, d), or paged with kPageSize and pages in reverse order) holding
// `counts[b]` rows of sequence b from global row starts[b] on, with their per-token scales; 0xAA bytes and NaN
// scales elsewhere. Fixed scales are the global ones.
struct Cache {
  std::int64_t capacity = 0, max_pages = 0;
  bool paged = false;
  std::int64_t scales_per_row = 0;
  std::vector<std::uint8_t> k, v;
  std::vector<float> k_scale, v_scale;
  std::vector<std::int32_t> block_table;

  Cache(const QuantCase& c, const GlobalCache& global, const std::vector<std::int64_t>& starts,
        const std::vector<std::int64_t>& counts, std::int64_t capacity)
      : capacity(capacity), paged(c.paged), scales_per_row(c.ScalesPerRow()) {
    max_pages = (capacity + kPageSize - 1) / kPageSize;
    const std::int64_t rows = paged ? kBatch * max_pages * kPageSize : kBatch * capacity;
    for (std::int64_t b = 0; b < kBatch; ++b)
      for (std::int64_t p = 0; p < max_pages; ++p)
        block_table.push_back(static_cast<std::int32_t>(kBatch * max_pages - 1 - (b * max_pages + p)));
    k.assign(static_cast<std::size_t>(rows * kHkv * kD), 0xAA);
    v = k;
    k_scale = scales_per_row > 0 ? std::vector<float>(static_cast<std::size_t>(rows * scales_per_row), kNaN)
                                 : global.k_scale;
    v_scale = scales_per_row > 0 ? k_scale : global.v_scale;
    for (std::int64_t b = 0; b < kBatch; ++b)
      for (std::int64_t j = 0; j < counts[b]; ++j) {
        const std::int64_t from = b * global.rows + starts[b] + j, to = Row(b, j);
        std::copy_n(global.k.begin() + from * kHkv * kD, kHkv * kD, k.begin() + to * kHkv * kD);
        std::copy_n(global.v.begin() + from * kHkv * kD, kHkv * kD, v.begin() + to * kHkv * kD);
        const std::int64_t n = scales_per_row;
        std::copy_n(global.k_scale.begin() + from * n, n, k_scale.begin() + to * n);
        std::copy_n(global.v_scale.begin() + from * n, n, v_scale.begin() + to * n);
      }
  }

  // Index of key row j of sequence b among the cache's rows.
  std::int64_t Row(std::int64_t b, std::int64_t j) const {
    if (!paged) return b * capacity + j;
    return block_table[static_cast<std::size_t>(b * max_pages + j / kPageSize)] * kPageSize + j % kPageSize;
  }
  // Every byte of key row j of sequence b: K's and V's values, then their per-token scales.
  std::vector<std::uint8_t> RowBytes(std::int64_t b, std::int64_t j) const {
    const std::int64_t row = Row(b, j), values = kHkv * kD;
    std::vector<std::uint8_t> bytes;
    const auto append = [&bytes](const void* first, std::size_t count) {
      for (std::size_t n = 0; n < count; ++n) bytes.push_back(static_cast<const std::uint8_t*>(first)[n]);
    };
    append(k.data() + row * values, static_cast<std::size_t>(values));
    append(v.data() + row * values, static_cast<std::size_t>(values));
    append(k_scale.data() + row * scales_per_row, static_cast<std::size_t>(scales_per_row) * sizeof(float));
    append(v_scale.data() + row * scales_per_row, static_cast<std::size_t>(scales_per_row) * sizeof(float));
    return bytes;
  }
};

struct Output {
  Tensor o;
  std::vector<float> lse;
};

// The decode call of `c` over `cache` with per-sequence key counts `counts`, float32 queries.
DecodeParams DecodeCall(const QuantCase& c, const Tensor& q, const Tensor& k_new, const Tensor& v_new, Cache& cache,
                        const std::vector<std::int32_t>& counts, Output& out) {
  DecodeParams p;
  p.batch = kBatch, p.seqlen_q = kNq, p.seqlen_new = c.Nnew, p.heads_q = kHq, p.heads_kv = kHkv, p.head_dim = kD;
  if (c.dv > 0) p.head_dim_v = c.dv;
  p.causal = true, p.num_threads = 1;
  p.cache_element = c.element, p.scale_granularity = c.granularity, p.scale_group_size = c.group_size;
  p.quantize_query_int8 = c.integer_scores, p.quantize_probs_u8 = c.integer_pv;
  if (cache.paged) {
    p.block_table = cache.block_table.data();
    p.block_table_stride = p.max_pages = cache.max_pages;
    p.num_pages = kBatch * cache.max_pages;
    p.page_size = kPageSize;
  } else {
    p.cache_seqlen_max = cache.capacity;
  }
  p.set_contiguous_strides();
  p.q = q.data(), p.o = out.o.data(), p.lse = out.lse.data(), p.cache_seqlens = counts.data();
  p.k_new = c.Nnew > 0 ? k_new.data() : nullptr;
  p.v_new = c.Nnew > 0 && c.dv == 0 ? v_new.data() : nullptr;
  p.k_cache = cache.k.data(), p.k_scale = cache.k_scale.data();
  p.v_cache = c.dv > 0 ? p.k_cache : cache.v.data();
  p.v_scale = c.dv > 0 ? p.k_scale : cache.v_scale.data();
  return p;
}

std::vector<QuantCase> Cases() {
  constexpr auto kInt8 = CacheElement::kInt8, kFp8 = CacheElement::kFp8E4M3, kE5M2 = CacheElement::kFp8E5M2;
  constexpr auto kToken = ScaleGranularity::kPerToken;
  return {
      {.element = kInt8, .granularity = kToken},
      {.element = kInt8, .granularity = kToken, .Nnew = 2},
      {.element = kInt8, .granularity = kToken, .group_size = 16, .paged = true, .Nnew = 2},
      {.element = kFp8, .granularity = ScaleGranularity::kPerHead, .Nnew = 2},
      {.element = kFp8, .granularity = ScaleGranularity::kPerTensor, .paged = true},
      {.element = kInt8, .granularity = kToken, .Nnew = 2, .integer_scores = true},
      {.element = kInt8, .granularity = kToken, .paged = true, .Nnew = 2, .integer_scores = true, .integer_pv = true},
      {.element = kInt8, .granularity = kToken, .dv = 32, .Nnew = 2},
      {.element = kFp8, .granularity = kToken, .group_size = 16, .dv = 32, .paged = true, .Nnew = 2},
      {.element = kE5M2, .granularity = ScaleGranularity::kPerHead, .paged = true, .Nnew = 2},
      {.element = kE5M2, .granularity = kToken, .group_size = 16, .Nnew = 2},
  };
}

// The merged result equals one process's over the whole cache up to the merge's float32 rounding (and, with
// integer P̃V, the weights' rounding per block of each rank's keys instead of the whole sequence's: at most
// 1/510 of the largest V value per key a row sees, 2e-2 here as decode_quantized_test bounds it); the appended
// rows and scales are those one process appends, on the tail rank only.
TEST(ShardedDecode, QuantizedCachesMatchOneProcess) {
  const int rank = WorldRank(), world = WorldSize();
  std::uint64_t seed = 4400;
  for (const QuantCase& c : Cases()) {
    seed += 10;
    const std::int64_t longest = 37 + c.Nnew;
    const GlobalCache global(c, longest, seed);
    const Tensor q = RandomTensor(kBatch, kNq, kHq, kD, DType::kF32, seed + 2);
    const Tensor k_new = RandomTensor(kBatch, c.Nnew, kHkv, kD, DType::kF32, seed + 3);
    const Tensor v_new = RandomTensor(kBatch, c.Nnew, kHkv, kD, DType::kF32, seed + 4);
    const Shards shards = ShardsOf(kBatch, rank, [world](std::int64_t b) { return KeysPerRank(b, world); });
    const std::vector<std::int64_t> zeros(kBatch, 0), &totals = shards.total, &mine = shards.mine;
    const auto output = [&] {
      return Output{NanTensor(kBatch, kNq, kHq, c.Dv(), DType::kF32),
                    std::vector<float>(static_cast<std::size_t>(kBatch * kHq * kNq), kNaN)};
    };

    Cache whole(c, global, zeros, totals, longest);
    const std::vector<std::int32_t> whole_counts(totals.begin(), totals.end());
    Output single = output();
    decode(DecodeCall(c, q, k_new, v_new, whole, whole_counts, single));

    Cache part(c, global, shards.before, mine, 37 + c.Nnew);
    const Cache untouched = part;
    const std::vector<std::int32_t> part_counts(mine.begin(), mine.end());
    Output sharded = output();
    DecodeParams call = DecodeCall(c, q, k_new, v_new, part, part_counts, sharded);
    call.cache_dtype = rank % 2 == 0 ? DType::kF32 : DType::kBF16;  // a float cache's type: ignored, need not agree
    sharded_decode(call, MPI_COMM_WORLD, 30);

    for (std::int64_t b = 0; b < kBatch; ++b) {
      for (std::int64_t j = 0; j < part.capacity; ++j) {
        const bool appended = rank == shards.tail[b] && j >= mine[b] && j < mine[b] + c.Nnew;
        EXPECT_EQ(part.RowBytes(b, j), appended ? whole.RowBytes(b, totals[b] + j - mine[b]) : untouched.RowBytes(b, j))
            << c.Name() << " rank " << rank << " sequence " << b << " row " << j;
      }
    }
    std::vector<std::int64_t> rows(static_cast<std::size_t>(kNq));
    for (std::int64_t i = 0; i < kNq; ++i) rows[static_cast<std::size_t>(i)] = i;
    const double tolerance = (c.integer_pv ? 2e-2 : 1e-5) * std::max(1.0, MaxAbs(single.o));
    EXPECT_LE(MaxOverRanks(MaxRowError(sharded.o, single.o, rows)), tolerance) << c.Name();
    EXPECT_LE(MaxOverRanks(MaxLseError(sharded.lse, single.lse)), 1e-5) << c.Name();
  }
}

}  // namespace
}  // namespace flashattn::distributed::testing
