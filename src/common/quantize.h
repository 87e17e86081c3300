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

#include "common/element.h"
#include "flashattn/flashattn.h"

namespace flashattn {

// The largest magnitude of a quantized element: 127 for int8, 448 for FP8 E4M3.
inline float QuantMax(CacheElement element) { return element == CacheElement::kInt8 ? 127.0f : kFp8E4M3Max; }

inline bool Quantized(CacheElement element) { return element != CacheElement::kFloat; }

// Bytes per cache element.
inline std::int64_t CacheElementBytes(const DecodeParams& p) {
  return Quantized(p.cache_element) ? 1 : static_cast<std::int64_t>(size_of(p.cache_dtype));
}

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

// The unscaled value of element `index` of a quantized array.
inline float LoadQuantized(const void* base, CacheElement element, std::int64_t index) {
  const std::uint8_t byte = static_cast<const std::uint8_t*>(base)[index];
  return element == CacheElement::kInt8 ? static_cast<float>(static_cast<std::int8_t>(byte)) : F32FromE4M3(byte);
}

// x / scale rounded to the element type (to nearest even, saturating); every element 0 when scale is 0.
inline std::uint8_t EncodeQuantized(float x, float scale, CacheElement element) {
  const float unscaled = scale == 0.0f ? 0.0f : x / scale;
  return element == CacheElement::kInt8 ? static_cast<std::uint8_t>(I8FromF32(unscaled)) : E4M3FromF32(unscaled);
}

// max|x| / qmax over x[0, n): the per-token scale of a group.
inline float GroupScale(const float* x, std::int64_t n, CacheElement element) {
  float max_abs = 0.0f;
  for (std::int64_t e = 0; e < n; ++e) max_abs = std::max(max_abs, std::fabs(x[e]));
  return max_abs / QuantMax(element);
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
  for (std::int64_t e = 0; e < width; ++e) out[e] = scales[e / g] * LoadQuantized(cache, p.cache_element, offset + e);
}

// x (d floats) quantized into dst: with per-token scales, one per group of g features computed and written
// to `scales`; otherwise with the fixed scale *scales.
inline void QuantizeRow(const float* x, std::int64_t d, CacheElement element, ScaleGranularity granularity,
                        std::int64_t group_size, float* scales, std::uint8_t* dst) {
  const bool per_token = granularity == ScaleGranularity::kPerToken;
  const std::int64_t g = per_token ? ScaleGroupSize(group_size, d) : d;
  for (std::int64_t e0 = 0; e0 < d; e0 += g) {
    if (per_token) scales[e0 / g] = GroupScale(x + e0, g, element);
    const float scale = scales[per_token ? e0 / g : 0];
    for (std::int64_t e = e0; e < e0 + g; ++e) dst[e] = EncodeQuantized(x[e], scale, element);
  }
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
