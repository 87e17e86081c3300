#include "bench/modes.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <string>

#include "bench/decode_baseline.h"
#include "bench/decode_common.h"
#include "support/elements.h"

namespace flashattn::bench {

namespace {

// Element offset of cache row (b, j) of K/V head 0, contiguous or through the block table.
std::int64_t CacheRow(const DecodeParams& p, std::int64_t b, std::int64_t j) {
  if (!p.paged()) return b * p.cache_strides.batch + j * p.cache_strides.seq;
  const std::int64_t page = p.block_table[b * p.block_table_stride + j / p.page_size];
  return page * p.cache_strides.batch + (j % p.page_size) * p.cache_strides.seq;
}

// The float32 cache the baseline reads: the library's cache itself when it already is contiguous float32,
// else a contiguous (batch, N, Hkv, d) float32 copy of the rows each sequence holds (exact: every f16/bf16 value
// is a float), zero past them.
struct BaselineCache {
  std::vector<float> k, v;
  const float* k_data = nullptr;
  const float* v_data = nullptr;
  std::string description;
};

void MakeBaselineCache(const DecodeParams& p, std::int64_t N, BaselineCache* cache) {
  if (p.cache_dtype == DType::kF32 && !p.paged()) {
    cache->k_data = static_cast<const float*>(p.k_cache);
    cache->v_data = static_cast<const float*>(p.v_cache);
    cache->description = "f32 (the same cache)";
    return;
  }
  const std::int64_t row = p.heads_kv * p.head_dim;  // one key position, all K/V heads: contiguous in both
  cache->k.resize(static_cast<std::size_t>(p.batch * N * row));
  cache->v.resize(cache->k.size());
  const std::int64_t elem = static_cast<std::int64_t>(size_of(p.cache_dtype));
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t j = 0; j < p.cache_seqlens[b]; ++j) {
      const std::int64_t src = CacheRow(p, b, j) * elem, dst = (b * N + j) * row;
      support::ConvertToF32(static_cast<const char*>(p.k_cache) + src, p.cache_dtype, row, cache->k.data() + dst);
      support::ConvertToF32(static_cast<const char*>(p.v_cache) + src, p.cache_dtype, row, cache->v.data() + dst);
    }
  cache->k_data = cache->k.data();
  cache->v_data = cache->v.data();
  cache->description = std::string("f32 contiguous copy of the ") + (p.paged() ? "paged " : "") +
                       std::string(to_string(p.cache_dtype)) + " cache";
}

// p over a float cache of `dtype` at k and v (same shape and strides), without a quantized cache's scales and
// options: the float16 cache timed beside a quantized one, and the values the baseline reads.
DecodeParams OverFloatCache(DecodeParams p, DType dtype, void* k, void* v) {
  p.cache_element = CacheElement::kFloat;
  p.cache_dtype = dtype;
  p.k_cache = k;
  p.v_cache = v;
  p.k_scale = p.v_scale = nullptr;
  p.scale_group_size = 0;
  p.quantize_query_int8 = false;
  p.quantize_probs_u8 = false;
  return p;
}

// key_indices (batch, Nq, Hkv, top_k) of case c: for each query row and K/V head, top_k distinct positions of the
// keys the row sees (causal: up to its diagonal) drawn at random (seeded), −1 past them; none without top_k.
std::vector<std::int32_t> SelectedKeys(const BenchCase& c, const std::vector<std::int32_t>& lengths) {
  if (c.top_k == 0) return {};
  std::vector<std::int32_t> lists(static_cast<std::size_t>(c.batch * c.seqlen_q * c.heads_kv * c.top_k), -1);
  std::mt19937_64 random(c.seed);
  std::vector<std::int32_t> positions;
  auto list = lists.begin();
  for (std::int64_t b = 0; b < c.batch; ++b) {
    positions.resize(static_cast<std::size_t>(lengths[b]));
    for (std::int64_t row = 0; row < c.seqlen_q * c.heads_kv; ++row, list += c.top_k) {
      const std::int64_t i = row / c.heads_kv, seen = c.causal ? lengths[b] - c.seqlen_q + i + 1 : lengths[b];
      std::iota(positions.begin(), positions.begin() + std::max<std::int64_t>(seen, 0), 0);
      const std::int64_t n = std::clamp<std::int64_t>(seen, 0, c.top_k);
      for (std::int64_t s = 0; s < n; ++s) {  // a partial Fisher-Yates shuffle: n distinct positions
        std::swap(positions[s], positions[s + static_cast<std::int64_t>(random() % (seen - s))]);
      }
      std::copy_n(positions.begin(), n, list);
    }
  }
  return lists;
}

}  // namespace

void AssignShuffledPages(const std::vector<std::int64_t>& lengths, std::int64_t page_size, DecodeParams* p,
                         std::vector<std::int32_t>* block_table) {
  // Each sequence takes the pages its length needs, in the order of a shuffled list of all pages; the
  // table's slots past a sequence's pages hold page 0 and are never read.
  const auto pages_of = [&](std::int64_t length) { return (length + page_size - 1) / page_size; };
  const std::int64_t longest = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
  p->page_size = page_size;
  p->max_pages = std::max<std::int64_t>(1, pages_of(longest));
  p->num_pages = 0;
  for (const std::int64_t length : lengths) p->num_pages += pages_of(length);
  p->block_table_stride = p->max_pages;
  std::vector<std::int32_t> pages(static_cast<std::size_t>(p->num_pages));
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), std::mt19937(1));
  block_table->assign(lengths.size() * static_cast<std::size_t>(p->max_pages), 0);
  auto next = pages.begin();
  for (std::size_t b = 0; b < lengths.size(); ++b) {
    const std::int64_t used = pages_of(lengths[b]);
    std::copy_n(next, used, block_table->begin() + static_cast<std::int64_t>(b) * p->max_pages);
    next += used;
  }
  p->block_table = block_table->data();
}

DecodeParams DecodeParamsOf(const BenchCase& c, std::vector<std::int32_t>* cache_seqlens,
                            std::vector<std::int32_t>* block_table) {
  DecodeParams p;
  p.batch = c.batch;
  p.seqlen_q = c.seqlen_q;
  p.heads_q = c.heads;
  p.heads_kv = c.heads_kv;
  p.head_dim = c.headdim;
  p.head_dim_v = c.headdim_v;
  p.dtype = p.cache_dtype = c.dtype;
  p.causal = c.causal;
  p.num_splits = c.num_splits;
  p.num_threads = c.threads;
  p.scale_group_size = c.scale_group_size;  // before the strides: the scales' strides count the groups
  const std::vector<std::int64_t> lengths = CacheLengths(c);
  cache_seqlens->assign(lengths.begin(), lengths.end());
  p.cache_seqlens = cache_seqlens->data();
  const std::int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  if (c.page_size > 0) {
    AssignShuffledPages(lengths, c.page_size, &p, block_table);
  } else {
    p.cache_seqlen_max = longest;
  }
  p.set_contiguous_strides();
  return p;
}

Row RunDecode(const BenchCase& c, const RunOptions& options, const Limits& limits) {
  Row row = StartRow(c, limits);
  std::vector<std::int32_t> cache_seqlens, block_table;
  DecodeParams p = DecodeParamsOf(c, &cache_seqlens, &block_table);
  const std::int64_t q_elems = c.batch * c.seqlen_q * c.heads * c.headdim;
  const std::int64_t o_elems = c.batch * c.seqlen_q * c.heads * c.headdim_v.value_or(c.headdim);
  // the longest sequence: the capacity of a contiguous cache (and of the baseline's copy)
  const std::int64_t longest = *std::max_element(cache_seqlens.begin(), cache_seqlens.end());
  const std::int64_t cache_elems =
      (p.paged() ? p.num_pages * p.page_size : c.batch * longest) * c.heads_kv * c.headdim;
  std::vector<std::uint16_t> q = RandomElements(q_elems, c.dtype, 0x5eed);
  std::vector<std::uint16_t> o = RandomElements(o_elems, c.dtype, 0);
  std::vector<float> lse(static_cast<std::size_t>(c.batch * c.heads * c.seqlen_q));
  const std::vector<float> sinks = SinkLogits(c);
  Cache cache;
  FillCache(c, cache_elems, &p, &cache);
  p.q = q.data();
  p.o = o.data();
  p.lse = lse.data();
  p.sinks = SinksOrNull(sinks);
  const std::vector<std::int32_t> selected = SelectedKeys(c, cache_seqlens);
  if (c.top_k > 0) p.key_indices = {selected.data(), c.top_k};
  validate(p);
  row.tensor_bytes = static_cast<std::int64_t>((q.size() + o.size()) * 2 + lse.size() * 4) + cache.Bytes();

  Traffic traffic = DecodeTraffic(c, limits, c.batch, c.top_k > 0 ? std::min(c.top_k, longest) : longest);
  // Every call of the row (the library's, the float16 cache's, the baseline's) after the evictor's read.
  const RunOptions run = EvictingBeforeEachCall(options, &traffic);
  TimeLibraryCall([&] { decode(p); }, run, &row);
  if (c.cache_element != CacheElement::kFloat) {  // the same call over a float16 cache, in the same run
    std::vector<std::uint16_t> k16 = RandomElements(cache_elems, DType::kF16, 0x5eed + 1);
    std::vector<std::uint16_t> v16 = RandomElements(c.headdim_v ? 0 : cache_elems, DType::kF16, 0x5eed + 2);
    const DecodeParams f16 = OverFloatCache(p, DType::kF16, k16.data(), c.headdim_v ? k16.data() : v16.data());
    traffic.f16_cache_median_ms = TimeCalls([&] { decode(f16); }, run.timing).median_ms;
  }
  if (c.top_k > 0) {  // dense decode over top_k contiguous keys of the same cache, in the same run
    DecodeParams dense = p;
    dense.key_indices = {};
    std::vector<std::int32_t> dense_lengths(cache_seqlens);
    for (std::int32_t& length : dense_lengths) length = std::min(length, static_cast<std::int32_t>(c.top_k));
    dense.cache_seqlens = dense_lengths.data();
    traffic.dense_top_k_median_ms = TimeCalls([&] { decode(dense); }, run.timing).median_ms;
  }

  // The baseline has no sinks, no V inside K and no selected keys.
  if (options.baseline && !c.sinks && !c.headdim_v && c.top_k == 0) {
    // A quantized cache's baseline reads the float32 values it was quantized from.
    const DecodeParams originals =
        OverFloatCache(p, c.cache_element == CacheElement::kFloat ? p.cache_dtype : DType::kF32, cache.k.data(),
                       cache.v.data());
    BaselineCache baseline_cache;
    MakeBaselineCache(originals, longest, &baseline_cache);
    traffic.baseline_cache = baseline_cache.description;
    if (c.cache_element != CacheElement::kFloat) {
      traffic.baseline_cache += std::string(" (the values of the ") + std::string(to_string(c.cache_element)) +
                                " cache before quantization)";
    }
    std::vector<float> q32(static_cast<std::size_t>(q_elems)), o32(static_cast<std::size_t>(q_elems));
    support::ConvertToF32(q.data(), c.dtype, q_elems, q32.data());
    DecodeBaselineProblem problem = BaselineProblemOf(originals, longest);
    problem.q = q32.data();
    problem.k = baseline_cache.k_data;
    problem.v = baseline_cache.v_data;
    problem.o = o32.data();
    const PrepareBaseline prepare = PrepareWithinScratchLimit<BlasDecodeBaseline>(problem, options);
    row.baseline = TimeArrangements(c.threads, run.timing, prepare, &row.note);
    if (row.baseline)
      row.max_abs_diff_vs_baseline = MaxAbsDiff(o.data(), c.dtype, o32.data(), DType::kF32, q_elems);
  }
  row.traffic = traffic;
  return row;
}

}  // namespace flashattn::bench
