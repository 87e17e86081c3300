// What the decode and serve modes of `flashattn bench` share: the cache, float or quantized with its scales;
// the row's traffic and roofline against the limits measured in the run; and the eviction of the CPU caches
// before each timed call.
#ifndef FLASHATTN_BENCH_DECODE_COMMON_H_
#define FLASHATTN_BENCH_DECODE_COMMON_H_

#include <cstdint>
#include <vector>

#include "bench/bench_case.h"
#include "bench/mode_common.h"
#include "bench/report.h"
#include "flashattn/decode.h"

namespace flashattn::bench {

// The cache of a float or quantized case: random values of the case's element type, or random float32
// values (kept: decode's baseline reads them) quantized by quantize_kv with the benchmark's scales.
struct Cache {
  std::vector<std::uint16_t> k, v;  // a float cache, or a quantized cache's float32 originals
  std::vector<std::uint8_t> k_values, v_values;
  std::vector<float> k_scale, v_scale;

  // What the caller owns for it: the float values, and a quantized cache's codes and scales.
  std::int64_t Bytes() const;
};

// Fills *cache with `elements` values per tensor for p's layout (paged or contiguous; p's scale_group_size and
// strides already set) and points p at it: p's cache pointers, and for a quantized case also its element,
// scale granularity, scales and integer options (quantize_query_int8, quantize_probs_u8).
void FillCache(const BenchCase& c, std::int64_t elements, DecodeParams* p, Cache* cache);

// A decode or serve row's traffic: CountBytesRead, the bandwidths and the int8 dot-product peak of `limits`,
// the split count the call uses for `sequences` sequences whose longest holds `longest` keys, and the
// roofline (DecodeRoofline) over those limits.
Traffic DecodeTraffic(const BenchCase& c, const Limits& limits, std::int64_t sequences, std::int64_t longest);

// `options` with, when it has an evictor, the evictor's read before every call (the warm-up too), so that each
// call reads its cache from main memory, as a model's layer does; *traffic records the bytes read. Without an
// evictor, `options` unchanged (a warm cache).
RunOptions EvictingBeforeEachCall(const RunOptions& options, Traffic* traffic);

}  // namespace flashattn::bench

#endif  // FLASHATTN_BENCH_DECODE_COMMON_H_
