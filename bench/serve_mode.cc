// `flashattn bench --mode serve`: one serving step, decoding sequences and prefill chunks in one packed call.
#include <algorithm>

#include "bench/decode_common.h"
#include "bench/modes.h"

namespace flashattn::bench {

namespace {

// The packed decode parameters of serve case `c`, pointers to q, o, lse and the cache unset: sequence b has
// ServeSequences(c)[b].rows query rows at cu_seqlens_q[b] and that many keys in its pages, causal.
DecodeParams ServeParamsOf(const BenchCase& c, std::vector<std::int32_t>* cu_seqlens_q,
                           std::vector<std::int32_t>* cache_seqlens, std::vector<std::int32_t>* block_table) {
  const std::vector<ServeSequence> sequences = ServeSequences(c);
  DecodeParams p;
  p.batch = static_cast<std::int64_t>(sequences.size());
  p.heads_q = c.heads;
  p.heads_kv = c.heads_kv;
  p.head_dim = c.headdim;
  p.dtype = p.cache_dtype = c.dtype;
  p.causal = true;
  p.num_splits = c.num_splits;
  p.num_threads = c.threads;
  p.scale_group_size = c.scale_group_size;  // before the strides: the scales' strides count the groups
  std::vector<std::int64_t> lengths;
  cu_seqlens_q->assign(1, 0);
  cache_seqlens->clear();
  for (const ServeSequence& s : sequences) {
    cu_seqlens_q->push_back(static_cast<std::int32_t>(cu_seqlens_q->back() + s.rows));
    cache_seqlens->push_back(static_cast<std::int32_t>(s.keys));
    lengths.push_back(s.keys);
    p.seqlen_q = std::max(p.seqlen_q, s.rows);  // max_seqlen_q
  }
  p.cu_seqlens_q = cu_seqlens_q->data();
  p.cache_seqlens = cache_seqlens->data();
  AssignShuffledPages(lengths, c.page_size, &p, block_table);
  p.set_contiguous_strides();  // packed: (total_q, Hq, d)
  return p;
}

}  // namespace

Row RunServe(const BenchCase& c, const RunOptions& options, const Limits& limits) {
  Row row = StartRow(c, limits);
  std::vector<std::int32_t> cu_seqlens_q, cache_seqlens, block_table;
  DecodeParams p = ServeParamsOf(c, &cu_seqlens_q, &cache_seqlens, &block_table);
  const std::int64_t rows = TotalQueryRows(c);
  const std::int64_t cache_elems = p.num_pages * p.page_size * c.heads_kv * c.headdim;
  std::vector<std::uint16_t> q = RandomElements(rows * c.heads * c.headdim, c.dtype, 0x5eed);
  std::vector<std::uint16_t> o = RandomElements(rows * c.heads * c.headdim, c.dtype, 0);
  std::vector<float> lse(static_cast<std::size_t>(rows * c.heads));  // (Hq, total_q)
  const std::vector<float> sinks = SinkLogits(c);
  Cache cache;
  FillCache(c, cache_elems, &p, &cache);
  p.q = q.data();
  p.o = o.data();
  p.lse = lse.data();
  p.sinks = SinksOrNull(sinks);
  validate(p);
  row.tensor_bytes = static_cast<std::int64_t>((q.size() + o.size()) * 2 + lse.size() * 4) + cache.Bytes();

  const std::int64_t longest = *std::max_element(cache_seqlens.begin(), cache_seqlens.end());
  Traffic traffic = DecodeTraffic(c, limits, p.batch, longest);
  TimeLibraryCall([&] { decode(p); }, EvictingBeforeEachCall(options, &traffic), &row);
  row.traffic = traffic;
  row.note = "no baseline for serve";
  return row;
}

}  // namespace flashattn::bench
