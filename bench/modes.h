// The modes of `flashattn bench`, one timed row per case each:
// - forward: times flashattn::forward on random inputs, then the BLAS baseline on the same inputs.
// - backward: runs flashattn::forward once (untimed) for O and LSE, then times flashattn::backward on random
//   dO, then the OpenBLAS standard backward on the same inputs, and reports 2.5× the forward's FLOPs.
//   --report-memory gives the peak resident growth of the first call beyond the caller's tensors (Q, K, V,
//   O, LSE, dO, dQ, dK, dV).
// - decode: times flashattn::decode (one new query row per sequence by default) over a full cache of random
//   keys and values, contiguous or paged (pages in shuffled order), then the unfused OpenBLAS decode over a
//   float32 cache of the same shape and contents (for a float16/bfloat16 cache: its exact float32 copy, so
//   the row compares the f16 cache with the f32 one). The row reports the bytes the call must move per
//   second against the read bandwidth measured in the same run, and the call's roofline (bench/roofline.h).
//   With --cache-len A:B each sequence holds a length of its own (CacheLengths). A quantized cache
//   (--cache-dtype int8 or fp8_e4m3) holds random float32 values quantized by quantize_kv; its bytes read
//   include the scales, the same call is timed over a float16 cache for the speedup, and the baseline reads
//   the float32 values before quantization.
// - serve: times one flashattn::decode call with packed queries (cu_seqlens_q) over a paged cache of random
//   keys and values, float or quantized as decode's (decode_common.h), for a serving step's batch: sequences
//   generating one token each over drawn cache lengths, and prefill chunks of many causal rows over a cached
//   prefix (ServeSequences). The row reports the decode rows' bytes and roofline, and the query rows (tokens)
//   per second. No baseline, and no float16 cache timed beside a quantized one.
// - indexer: times flashattn::lightning_indexer (DeepSeek-V3.2's lightning indexer) of seqlen_q query rows per
//   sequence over a key cache of seqlen_k random keys (contiguous or paged; of --dtype, or quantized by
//   quantize_kv with one scale per key), keeping top_k keys per row. The row reports its FLOP rate (the score
//   products, CountFlops) against the FMA peak. No baseline.
#ifndef FLASHATTN_BENCH_MODES_H_
#define FLASHATTN_BENCH_MODES_H_

#include <cstdint>
#include <vector>

#include "bench/bench_case.h"
#include "bench/mode_common.h"
#include "bench/report.h"
#include "flashattn/decode.h"

namespace flashattn::bench {

Row RunForward(const BenchCase& c, const RunOptions& options, const Limits& limits);
Row RunBackward(const BenchCase& c, const RunOptions& options, const Limits& limits);
Row RunDecode(const BenchCase& c, const RunOptions& options, const Limits& limits);
Row RunServe(const BenchCase& c, const RunOptions& options, const Limits& limits);
Row RunIndexer(const BenchCase& c, const RunOptions& options, const Limits& limits);

// Pages for sequences of `lengths` keys into p (page_size, max_pages, num_pages, block_table): sequence b takes
// ⌈lengths[b] / page_size⌉ pages of a shuffled list of all num_pages (deterministic); *block_table (one row of
// max_pages per sequence) holds page 0 in the slots no sequence uses.
void AssignShuffledPages(const std::vector<std::int64_t>& lengths, std::int64_t page_size, DecodeParams* p,
                         std::vector<std::int32_t>* block_table);

// The decode parameters of case `c` (mode decode), pointers unset: q, o (batch, Nq, Hq, d); sequence b holds
// CacheLengths(c)[b] cached keys (`cache_seqlens`), in a contiguous cache of the longest's capacity or a paged
// one where sequence b has ⌈its length / page_size⌉ pages: `block_table` (batch, pages of the longest)
// receives all num_pages pages in a shuffled order (deterministic), page 0 in the slots no sequence uses.
DecodeParams DecodeParamsOf(const BenchCase& c, std::vector<std::int32_t>* cache_seqlens,
                            std::vector<std::int32_t>* block_table);

}  // namespace flashattn::bench

#endif  // FLASHATTN_BENCH_MODES_H_
