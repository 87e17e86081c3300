// The rows of a decode cache of any element type (include/flashattn/decode.h, CacheElement), as float32 and
// back: the values of a quantized row are q·scale per group of g features, and a row is quantized with
// scale = max|x| / qmax per group (per-token scales) or with the cache's fixed scale (per head, per tensor).
// The reference decode, the kernel's append and quantize_kv all go through these, so they store the same
// bytes; docs/quantized_cache.md gives the formats.
#ifndef FLASHATTN_COMMON_QUANTIZE_H_
#define FLASHATTN_COMMON_QUANTIZE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/cache_element_traits.h"
#include "common/element.h"
#include "flashattn/flashattn.h"

namespace flashattn {

// The largest magnitude of a quantized element (its traits' kMax).
inline float QuantMax(CacheElement element) {
  return VisitQuantizedElement(element, [](auto traits) { return decltype(traits)::kMax; });
}

inline bool Quantized(CacheElement element) { return element != CacheElement::kFloat; }

// Bytes per cache element.
inline std::int64_t CacheElementBytes(CacheElement element, DType cache_dtype) {
  return VisitCacheElement(element, [&](auto traits) -> std::int64_t {
    if constexpr (decltype(traits)::kQuantized) return decltype(traits)::kBytes;
    else return static_cast<std::int64_t>(size_of(cache_dtype));
  });
}
inline std::int64_t CacheElementBytes(const DecodeParams& p) { return CacheElementBytes(p.cache_element, p.cache_dtype); }

// Features per scale: the group size of per-token scales, else the whole row.
inline std::int64_t ScaleGroupSize(std::int64_t group_size, std::int64_t d) { return group_size > 0 ? group_size : d; }

// The strides of the scales as a (batch or page, seq, head) tensor: a fixed scale repeats (stride 0) along
// what it is shared by.
inline Strides ScaleStridesOf(ScaleGranularity granularity, const Strides& per_token) {
  switch (granularity) {
    case ScaleGranularity::kPerToken: return per_token;
    case ScaleGranularity::kPerHead: return {0, 0, 1};
    case ScaleGranularity::kPerTensor: return {0, 0, 0};
  }
  return {};
}

inline Strides ScaleStridesOf(const DecodeParams& p) { return ScaleStridesOf(p.scale_granularity, p.scale_strides); }

// Offset of row (b, j, hk) in a tensor of (batch or page, seq, head) strides s: the cache or its scales. A
// paged cache finds key j of sequence b in page block_table[b][j / page_size], slot j % page_size.
inline std::int64_t CacheRowOffset(const DecodeParams& p, const Strides& s, std::int64_t b, std::int64_t j,
                                   std::int64_t hk) {
  if (!p.paged()) return b * s.batch + j * s.seq + hk * s.head;
  const std::int64_t page = p.block_table[b * p.block_table_stride + j / p.page_size];
  return page * s.batch + (j % p.page_size) * s.seq + hk * s.head;
}

// The unscaled value of element `index` of a quantized array.
inline float LoadQuantized(const void* base, CacheElement element, std::int64_t index) {
  const std::uint8_t code = static_cast<const std::uint8_t*>(base)[index];
  return VisitQuantizedElement(element, [&](auto traits) { return decltype(traits)::Decode(code); });
}

// x / scale rounded to the element type of Traits (to nearest even, saturating); 0 when scale is 0.
template <typename Traits>
std::uint8_t EncodeScaled(float x, float scale) {
  return Traits::Encode(scale == 0.0f ? 0.0f : x / scale);
}

// EncodeScaled for the run-time element type.
inline std::uint8_t EncodeQuantized(float x, float scale, CacheElement element) {
  return VisitQuantizedElement(element, [&](auto traits) { return EncodeScaled<decltype(traits)>(x, scale); });
}

// max|x| / qmax over x[0, n): the per-token scale of a group.
template <typename Traits>
float GroupScale(const float* x, std::int64_t n) {
  float max_abs = 0.0f;
  for (std::int64_t e = 0; e < n; ++e) max_abs = std::max(max_abs, std::fabs(x[e]));
  return max_abs / Traits::kMax;
}

// Cache row `offset` (an element offset) of `width` values (d for a K row, dv for a V row) as float32: its
// elements of cache_dtype, or its quantized elements times the scales at `scales` (one per group; unused for a
// float cache).
inline void LoadCacheRow(const DecodeParams& p, const void* cache, const float* scales, std::int64_t offset,
                         float* out, std::int64_t width) {
  if (!Quantized(p.cache_element)) {
    for (std::int64_t e = 0; e < width; ++e) out[e] = LoadAsFloat(cache, p.cache_dtype, offset + e);
    return;
  }
  const std::int64_t g = ScaleGroupSize(p.scale_group_size, p.head_dim);
  const auto* codes = static_cast<const std::uint8_t*>(cache) + offset;
  VisitQuantizedElement(p.cache_element, [&](auto traits) {
    for (std::int64_t e = 0; e < width; ++e) out[e] = scales[e / g] * decltype(traits)::Decode(codes[e]);
  });
}

// x (d floats) quantized into dst: with per-token scales, one per group of g features computed and written
// to `scales`; otherwise with the fixed scale *scales.
inline void QuantizeRow(const float* x, std::int64_t d, CacheElement element, ScaleGranularity granularity,
                        std::int64_t group_size, float* scales, std::uint8_t* dst) {
  const bool per_token = granularity == ScaleGranularity::kPerToken;
  const std::int64_t g = per_token ? ScaleGroupSize(group_size, d) : d;
  VisitQuantizedElement(element, [&](auto traits) {
    using Traits = decltype(traits);
    for (std::int64_t e0 = 0; e0 < d; e0 += g) {
      if (per_token) scales[e0 / g] = GroupScale<Traits>(x + e0, g);
      const float scale = scales[per_token ? e0 / g : 0];
      for (std::int64_t e = e0; e < e0 + g; ++e) dst[e] = EncodeScaled<Traits>(x[e], scale);
    }
  });
}

// Writes x (`width` floats: d for a K row, dv for a V row) into cache row `offset`: rounded to cache_dtype,
// or quantized (QuantizeRow) with the row's scales at `scales`.
inline void StoreCacheRow(const DecodeParams& p, void* cache, float* scales, std::int64_t offset, const float* x,
                          std::int64_t width) {
  if (!Quantized(p.cache_element)) {
    for (std::int64_t e = 0; e < width; ++e) StoreFromFloat(cache, p.cache_dtype, offset + e, x[e]);
    return;
  }
  QuantizeRow(x, width, p.cache_element, p.scale_granularity, p.scale_group_size, scales,
              static_cast<std::uint8_t*>(cache) + offset);
}

}  // namespace flashattn

#endif  // FLASHATTN_COMMON_QUANTIZE_H_
