// `flashattn bench --mode serve`: one serving step, decoding sequences and prefill chunks in one packed call.
#include <algorithm>

#include "bench/modes.h"
#include "bench/roofline.h"

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

// The bytes, bandwidths and roofline of the row, as a decode row has them.
Traffic ServeTraffic(const BenchCase& c, const Limits& limits, std::int64_t longest) {
  Traffic traffic;
  traffic.bytes_read = CountBytesRead(c);
  if (limits.bandwidth) {
    traffic.read_gbs = limits.bandwidth->read_gbs;
    traffic.triad_gbs = limits.bandwidth->triad_gbs;
  }
  const std::int64_t sequences = c.batch + c.prefill_seqs;
  traffic.num_splits = c.num_splits > 0 ? c.num_splits : choose_num_splits(sequences, longest, c.threads);
  const MachineLimits machine{.read_gbs = traffic.read_gbs, .fma_gflops = limits.peak.gflops};
  traffic.roofline = DecodeRoofline(c, machine);
  return traffic;
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
  std::vector<std::uint16_t> k = RandomElements(cache_elems, c.dtype, 0x5eed + 1);
  std::vector<std::uint16_t> v = RandomElements(cache_elems, c.dtype, 0x5eed + 2);
  const std::vector<float> sinks = SinkLogits(c);
  p.q = q.data();
  p.o = o.data();
  p.lse = lse.data();
  p.k_cache = k.data();
  p.v_cache = v.data();
  p.sinks = SinksOrNull(sinks);
  validate(p);
  row.tensor_bytes = static_cast<std::int64_t>((q.size() + o.size() + k.size() + v.size()) * 2 + lse.size() * 4);

  const std::int64_t longest = *std::max_element(cache_seqlens.begin(), cache_seqlens.end());
  Traffic traffic = ServeTraffic(c, limits, longest);
  // As decode mode: the evictor's read before each call, so that the cache comes from main memory.
  RunOptions run = options;
  volatile std::int64_t evicted_words = 0;  // kept, so that the read is not optimized away
  if (options.evictor) {
    run.timing.before_each = [&evicted_words, evictor = options.evictor] { evicted_words = evictor->Evict(); };
    traffic.evicted_bytes = options.evictor->bytes();
  }
  TimeLibraryCall([&] { decode(p); }, run, &row);
  row.traffic = traffic;
  row.note = "no baseline for serve";
  return row;
}

}  // namespace flashattn::bench
