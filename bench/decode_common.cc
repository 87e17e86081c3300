#include "bench/decode_common.h"

#include <algorithm>
#include <tuple>

#include "bench/roofline.h"

namespace flashattn::bench {

namespace {

volatile std::int64_t evicted_words = 0;  // the evictor's sum, kept so that its read is not optimized away

}  // namespace

std::int64_t Cache::Bytes() const {
  return static_cast<std::int64_t>((k.size() + v.size()) * 2 + k_values.size() + v_values.size() +
                                   (k_scale.size() + v_scale.size()) * 4);
}

void FillCache(const BenchCase& c, std::int64_t elements, DecodeParams* p, Cache* cache) {
  const bool quantized = c.cache_element != CacheElement::kFloat;
  const DType random_type = quantized ? DType::kF32 : p->cache_dtype;
  cache->k = RandomElements(elements, random_type, 0x5eed + 1);
  // With --headdim-v, V is the first dv features of the K cache (multi-head latent attention): no V cache.
  cache->v = RandomElements(c.headdim_v ? 0 : elements, random_type, 0x5eed + 2);
  p->k_cache = cache->k.data();
  p->v_cache = c.headdim_v ? cache->k.data() : cache->v.data();
  if (!quantized) return;
  QuantizeParams q;
  q.outer = p->paged() ? p->num_pages : p->batch;
  q.seqlen = p->paged() ? p->page_size : p->cache_seqlen_max;
  q.heads = p->heads_kv;
  q.head_dim = p->head_dim;
  q.element = c.cache_element;
  q.granularity = default_scale_granularity(c.cache_element, c.scale_group_size);
  q.group_size = c.scale_group_size;
  q.set_contiguous_strides();
  const std::int64_t scales =
      q.granularity == ScaleGranularity::kPerToken ? q.outer * q.seqlen * q.heads * c.ScaleGroups() : q.heads;
  for (auto [x, values, scale] : {std::tuple{&cache->k, &cache->k_values, &cache->k_scale},
                                  std::tuple{&cache->v, &cache->v_values, &cache->v_scale}}) {
    if (x->empty()) continue;  // V inside K: K's values and scales
    values->resize(static_cast<std::size_t>(elements));
    scale->resize(static_cast<std::size_t>(std::max<std::int64_t>(1, scales)));
    q.x = x->data(), q.values = values->data(), q.scales = scale->data();
    quantize_kv(q);
  }
  p->cache_element = q.element;
  p->scale_granularity = q.granularity;
  p->quantize_query_int8 = c.quantize_query;
  p->quantize_probs_u8 = c.quantize_probs;
  p->k_cache = cache->k_values.data();
  p->v_cache = c.headdim_v ? p->k_cache : cache->v_values.data();
  p->k_scale = cache->k_scale.data();
  p->v_scale = c.headdim_v ? p->k_scale : cache->v_scale.data();
}

Traffic DecodeTraffic(const BenchCase& c, const Limits& limits, std::int64_t sequences, std::int64_t longest) {
  Traffic traffic;
  traffic.bytes_read = CountBytesRead(c);
  if (limits.bandwidth) {
    traffic.read_gbs = limits.bandwidth->read_gbs;
    traffic.triad_gbs = limits.bandwidth->triad_gbs;
  }
  traffic.num_splits = c.num_splits > 0 ? c.num_splits : choose_num_splits(sequences, longest, c.threads);
  MachineLimits machine{.read_gbs = traffic.read_gbs, .fma_gflops = limits.peak.gflops};
  if (limits.int8_dot_peak) {
    traffic.int8_dot_gops = machine.int8_dot_gops = limits.int8_dot_peak->gops;
    machine.integer_pv = limits.int8_dot_peak->integer_pv;
  }
  traffic.roofline = DecodeRoofline(c, machine);
  return traffic;
}

RunOptions EvictingBeforeEachCall(const RunOptions& options, Traffic* traffic) {
  RunOptions run = options;
  if (!options.evictor) return run;
  run.timing.before_each = [evictor = options.evictor] { evicted_words = evictor->Evict(); };
  traffic->evicted_bytes = options.evictor->bytes();
  return run;
}

}  // namespace flashattn::bench
