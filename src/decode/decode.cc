// The decode call's small public helpers: the split rule, the default strides, names and scale granularities.
// decode() itself validates and schedules in src/decode_schedule.cc; the kernel's steps are in decode/decode.h.
#include <omp.h>

#include <algorithm>

#include "common/cache_element_traits.h"
#include "decode/decode.h"
#include "flashattn/decode.h"

namespace flashattn {

std::int64_t choose_num_splits(std::int64_t batch, std::int64_t max_seqlen_k, int num_threads) {
  constexpr std::int64_t kMinChunk = 512;  // keys; below this the merge and the scheduling start to show
  const std::int64_t items = std::max<std::int64_t>(1, batch);
  const int threads = num_threads > 0 ? num_threads : omp_get_max_threads();
  const std::int64_t wanted = 2 * static_cast<std::int64_t>(threads);  // items to keep all busy
  if (items >= wanted) return 1;
  const std::int64_t splits = (wanted + items - 1) / items;
  return std::clamp<std::int64_t>(std::min(splits, max_seqlen_k / kMinChunk), 1, splits);
}

void DecodeParams::set_contiguous_strides() {
  const std::int64_t d = head_dim;
  // Packed rows have no batch stride: sequence b starts at row cu_seqlens_q[b].
  const std::int64_t q_rows = packed() ? 0 : seqlen_q, new_rows = packed() ? 0 : seqlen_new;
  q_strides = {q_rows * heads_q * d, heads_q * d, d};
  new_strides = {new_rows * heads_kv * d, heads_kv * d, d};
  const std::int64_t dv = value_head_dim();
  o_strides = {q_rows * heads_q * dv, heads_q * dv, dv};
  const std::int64_t rows = paged() ? page_size : cache_seqlen_max;
  cache_strides = {rows * heads_kv * d, heads_kv * d, d};
  const std::int64_t groups = scale_group_size > 0 ? d / scale_group_size : 1;
  scale_strides = {rows * heads_kv * groups, heads_kv * groups, groups};
}

std::string_view to_string(CacheElement element) {
  if (!IsCacheElement(element)) return "unknown";
  return VisitCacheElement(element, [](auto traits) { return decltype(traits)::kName; });
}

std::string_view to_string(ScaleGranularity granularity) {
  switch (granularity) {
    case ScaleGranularity::kPerToken: return "per_token";
    case ScaleGranularity::kPerHead: return "per_head";
    case ScaleGranularity::kPerTensor: return "per_tensor";
  }
  return "unknown";
}

ScaleGranularity default_scale_granularity(CacheElement element, std::int64_t group_size) {
  if (group_size > 0) return ScaleGranularity::kPerToken;  // groups exist per token only
  return VisitCacheElement(element, [](auto traits) {
    if constexpr (decltype(traits)::kQuantized) return decltype(traits)::kDefaultGranularity;
    else return ScaleGranularity::kPerHead;  // a float cache has no scales
  });
}

}  // namespace flashattn
