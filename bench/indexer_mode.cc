#include <cstdint>
#include <vector>

#include "bench/modes.h"
#include "flashattn/indexer.h"

namespace flashattn::bench {

namespace {

// The key cache of case c: random keys of c.dtype, or random float32 keys quantized by quantize_kv with one
// scale per key (a quantized cache), `rows` key rows of d in (rows, 1, d) order.
struct KeyCache {
  std::vector<std::uint16_t> floats;  // a float cache
  std::vector<std::uint8_t> codes;    // a quantized one
  std::vector<float> scales;

  KeyCache(const BenchCase& c, std::int64_t rows) {
    const std::int64_t n = rows * c.headdim;
    if (c.cache_element == CacheElement::kFloat) {
      floats = RandomElements(n, c.dtype, 0x5eed + 1);
      return;
    }
    const std::vector<std::uint16_t> x = RandomElements(n, DType::kF32, 0x5eed + 1);
    codes.resize(static_cast<std::size_t>(n));
    scales.resize(static_cast<std::size_t>(rows));
    QuantizeParams q;
    q.x = x.data(), q.values = codes.data(), q.scales = scales.data();
    q.outer = 1, q.seqlen = rows, q.heads = 1, q.head_dim = c.headdim;
    q.dtype = DType::kF32, q.element = c.cache_element, q.granularity = ScaleGranularity::kPerToken;
    q.set_contiguous_strides();
    quantize_kv(q);
  }
  const void* data() const { return floats.empty() ? static_cast<const void*>(codes.data()) : floats.data(); }
  std::int64_t Bytes() const {
    return static_cast<std::int64_t>(floats.size() * 2 + codes.size() + scales.size() * 4);
  }
};

}  // namespace

Row RunIndexer(const BenchCase& c, const RunOptions& options, const Limits& limits) {
  Row row = StartRow(c, limits);
  IndexerParams p;
  p.batch = c.batch, p.seqlen_q = c.seqlen_q, p.heads = c.heads, p.head_dim = c.headdim;
  p.dtype = p.cache_dtype = c.dtype;
  p.cache_element = c.cache_element;
  p.top_k = c.top_k, p.causal = c.causal, p.num_threads = c.threads;
  std::vector<std::int32_t> cache_seqlens(static_cast<std::size_t>(c.batch), static_cast<std::int32_t>(c.seqlen_k));
  std::vector<std::int32_t> block_table;
  p.cache_seqlens = cache_seqlens.data();
  if (c.page_size > 0) {  // decode's shuffled pages, through its parameters
    DecodeParams pages;
    AssignShuffledPages(std::vector<std::int64_t>(static_cast<std::size_t>(c.batch), c.seqlen_k), c.page_size, &pages,
                        &block_table);
    p.page_size = pages.page_size, p.max_pages = pages.max_pages, p.num_pages = pages.num_pages;
    p.block_table_stride = pages.block_table_stride, p.block_table = block_table.data();
  } else {
    p.cache_seqlen_max = c.seqlen_k;
  }
  p.set_contiguous_strides();
  const KeyCache keys(c, c.page_size > 0 ? p.num_pages * p.page_size : c.batch * c.seqlen_k);
  const std::vector<std::uint16_t> q = RandomElements(c.batch * c.seqlen_q * c.heads * c.headdim, c.dtype, 0x5eed);
  const std::vector<std::uint16_t> w = RandomElements(c.batch * c.seqlen_q * c.heads, DType::kF32, 0x5eed + 2);
  std::vector<std::int32_t> indices(static_cast<std::size_t>(c.batch * c.seqlen_q * c.top_k));
  p.q = q.data();
  p.k_cache = keys.data();
  p.k_scale = keys.scales.empty() ? nullptr : keys.scales.data();
  p.weights = reinterpret_cast<const float*>(w.data());
  p.key_indices = indices.data();
  validate(p);
  row.tensor_bytes = static_cast<std::int64_t>(q.size() * 2 + w.size() * 2 + indices.size() * 4) + keys.Bytes();
  TimeLibraryCall([&] { lightning_indexer(p); }, options, &row);
  return row;
}

}  // namespace flashattn::bench
