// libFuzzer target: flashattn::decode at small sizes (b ≤ 3, Nq ≤ 4, Nnew ≤ 4, ≤ 40 cached keys, Hq ≤ 9,
// d ≤ 70): contiguous and paged caches (page size 1–9, shuffled or shared pages, junk in the table entries
// past each sequence's keys), appended keys, rotary in both styles, splits, threads, causal, windows,
// softcap, ALiBi, layouts, every compiled SIMD target (simd_target.h); and now and then one invalid value.
// A third of the valid calls read a quantized cache instead (QuantizeCaches: int8 per token, per group, per
// head or per tensor, FP8 E4M3 and E5M2 likewise; int8 sometimes with integer scores, and without scale groups
// sometimes with u8-rounded weights of P̃V), filled by quantize_kv from the drawn values; the checks then read
// the dequantized cache, with the rounding of appended rows, queries and weights. A quarter of the valid calls
// read V inside the K rows (ReadValuesInsideKeys: multi-head latent attention's dv ≤ d, K's scales).
// A valid call must (1) write exactly the appended slots of the caches, with the rotated k_new and v_new,
// (2) give, per sequence, O and LSE within the bound of oracle_check.h of the float64 oracle over the cache
// contents after the call and the rotated queries, (3) write nothing between O's elements and leave its
// inputs alone. An invalid call must throw flashattn::Error with the caches, O and LSE unchanged.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "call_check.h"
#include "common/cache_element_traits.h"
#include "common/quantize.h"
#include "flashattn/decode.h"
#include "fuzz_input.h"
#include "fuzz_tensor.h"
#include "oracle_check.h"
#include "simd_target.h"

namespace flashattn::fuzz {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

struct DecodeCall {
  DecodeParams params;
  Tensor q, k_new, v_new, o, k_cache, v_cache;  // a quantized cache: one byte per element, strides as drawn
  std::vector<float> k_scale, v_scale;           // a quantized cache's scales
  std::vector<std::int32_t> cache_seqlens, block_table;
  std::vector<float> lse, alibi, cos, sin;
  std::int64_t capacity = 0;  // keys per sequence
  bool values_in_keys = false;  // V is the first dv features of k_cache's rows, scaled by k_scale
  std::string invalid;
};

// The (first) feature paired with feature c by rotary, and whether c is the first of its pair.
std::int64_t RotaryPartner(std::int64_t c, std::int64_t rotary_dim, bool interleaved, bool* first) {
  if (interleaved) {
    *first = c % 2 == 0;
    return *first ? c + 1 : c - 1;
  }
  *first = c < rotary_dim / 2;
  return *first ? c + rotary_dim / 2 : c - rotary_dim / 2;
}

// x[c] rotated to position pos, in float64 (x0' = x0·cos − x1·sin, x1' = x0·sin + x1·cos).
double Rotated(const DecodeCall& call, const std::vector<double>& x, std::int64_t c, std::int64_t pos) {
  const DecodeParams& p = call.params;
  if (c >= p.rotary_dim) return x[c];
  bool first;
  const std::int64_t partner = RotaryPartner(c, p.rotary_dim, p.rotary_interleaved, &first);
  const std::int64_t angle = p.rotary_interleaved ? c / 2 : c % (p.rotary_dim / 2);
  const double cos = call.cos[pos * (p.rotary_dim / 2) + angle], sin = call.sin[pos * (p.rotary_dim / 2) + angle];
  return first ? x[c] * cos - x[partner] * sin : x[partner] * sin + x[c] * cos;
}

std::vector<double> Row(const Tensor& t, std::int64_t n, std::int64_t s, std::int64_t h) {
  std::vector<double> row(t.sizes[3]);
  for (std::int64_t c = 0; c < t.sizes[3]; ++c) row[c] = t.Get(n, s, h, c);
  return row;
}

// Cache element (outer, slot, hk, c) of K (key) or V as float32: dequantized when the cache is quantized.
float CacheValue(const DecodeCall& call, bool key, std::int64_t outer, std::int64_t slot, std::int64_t hk,
                 std::int64_t c) {
  const DecodeParams& p = call.params;
  const bool from_k = key || call.values_in_keys;
  const Tensor& t = from_k ? call.k_cache : call.v_cache;
  if (!Quantized(p.cache_element)) return t.Get(outer, slot, hk, c);
  const Strides s = ScaleStridesOf(p);
  const std::int64_t g = ScaleGroupSize(p.scale_group_size, p.head_dim);
  const float scale = (from_k ? call.k_scale : call.v_scale)[outer * s.batch + slot * s.seq + hk * s.head + c / g];
  return scale * LoadQuantized(t.bytes.data(), p.cache_element, t.Offset(outer, slot, hk, c));
}

// How far a value x stored into a quantized cache may land from it: half a step at its scale (the traits'
// MaxRoundingError: int8's is half the scale; FP8's half of 2⁻³ (E4M3) or 2⁻² (E5M2) of x's binade, more
// among subnormals) after saturation at ±qmax·scale, plus the float32 roundings of x / scale and scale·q.
double QuantizedStoreError(CacheElement element, double scale, double x) {
  const double limit = QuantMax(element) * scale;
  const double saturated = std::clamp(x, -limit, limit);
  const double half_step = VisitQuantizedElement(element, [&](auto traits) {
    return scale * decltype(traits)::MaxRoundingError(scale == 0.0 ? 0.0 : saturated / scale);
  });
  return std::fabs(x - saturated) + 1.001 * half_step + 4 * 0x1p-24 * std::fabs(x);
}

// (page or batch, slot) of key j of sequence b.
std::pair<std::int64_t, std::int64_t> CacheSlot(const DecodeCall& call, std::int64_t b, std::int64_t j) {
  const DecodeParams& p = call.params;
  if (!p.paged()) return {b, j};
  return {call.block_table[b * p.block_table_stride + j / p.page_size], j % p.page_size};
}

void DrawCache(FuzzInput& in, Rng& rng, DecodeCall& call, std::int64_t needed) {
  DecodeParams& p = call.params;
  const bool paged = in.Bool();
  std::int64_t outer, slots;
  if (paged) {
    p.page_size = in.Range(1, 9);
    p.max_pages = (needed + p.page_size - 1) / p.page_size + in.Range(0, 2);
    p.num_pages = p.batch * p.max_pages + in.Range(0, 3);
    p.block_table_stride = p.max_pages + in.Range(0, 2);
    call.capacity = p.max_pages * p.page_size;
    // Distinct pages in shuffled order; without appended keys, sometimes pages shared between sequences.
    const bool shared = p.seqlen_new == 0 && in.OneIn(3);
    std::vector<std::int32_t> pages(p.num_pages);
    std::iota(pages.begin(), pages.end(), 0);
    for (std::size_t n = pages.size(); n > 1; --n) std::swap(pages[n - 1], pages[rng.Next() % n]);
    // A paged call is one with block_table set: the empty table of batch 0 still gets an address.
    call.block_table.resize(std::max<std::int64_t>(1, p.batch * p.block_table_stride));
    std::size_t next = 0;
    for (std::int64_t b = 0; b < p.batch; ++b) {
      const std::int64_t keys = call.cache_seqlens[b] + p.seqlen_new;
      const std::int64_t used = (keys + p.page_size - 1) / p.page_size;
      for (std::int64_t n = 0; n < p.block_table_stride; ++n) {
        std::int32_t& entry = call.block_table[b * p.block_table_stride + n];
        if (n < used) {
          entry = shared ? static_cast<std::int32_t>(rng.Next() % p.num_pages) : pages[next++];
        } else {  // never read: any value
          entry = in.Pick<std::int32_t>({-7, static_cast<std::int32_t>(p.num_pages), INT32_MAX, 0});
        }
      }
    }
    p.block_table = call.block_table.data();
    outer = p.num_pages, slots = p.page_size;
  } else {
    p.cache_seqlen_max = needed + in.Range(0, 3);
    call.capacity = p.cache_seqlen_max;
    outer = p.batch, slots = p.cache_seqlen_max;
  }
  // The caches are written when keys are appended (no broadcast then); K and V share their strides.
  call.k_cache = DrawTensor(in, {outer, slots, p.heads_kv, p.head_dim}, p.dtype, /*input=*/p.seqlen_new == 0);
  call.v_cache = call.k_cache;
  for (Tensor* cache : {&call.k_cache, &call.v_cache}) {
    for (auto& byte : cache->bytes) byte = static_cast<unsigned char>(rng.Next());
    FillRandom(*cache, rng, 2.0f);
  }
  p.k_cache = call.k_cache.data(), p.v_cache = call.v_cache.data();
  p.cache_strides = call.k_cache.strides;
}

// Replaces the drawn float caches by quantized ones holding their values (quantize_kv), with scales of a
// drawn granularity; int8 sometimes with integer scores, and with one scale per row sometimes with u8-rounded
// weights of P̃V. Caches that broadcast an element or hold none stay float (quantize_kv writes each element
// once).
void QuantizeCaches(FuzzInput& in, Rng& rng, DecodeCall& call) {
  DecodeParams& p = call.params;
  const Strides& cs = call.k_cache.strides;
  if (call.k_cache.Empty() || cs.batch == 0 || cs.seq == 0 || cs.head == 0) return;
  const CacheElement element = in.Pick({CacheElement::kInt8, CacheElement::kFp8E4M3, CacheElement::kFp8E5M2});
  const ScaleGranularity granularity =
      in.Pick({ScaleGranularity::kPerToken, ScaleGranularity::kPerHead, ScaleGranularity::kPerTensor});
  std::int64_t group_size = 0;
  if (granularity == ScaleGranularity::kPerToken && in.Bool()) {
    group_size = in.Range(1, p.head_dim);
    while (p.head_dim % group_size != 0) --group_size;  // a divisor of d
  }
  const auto& sizes = call.k_cache.sizes;  // (outer, slots, Hkv, d)
  const std::int64_t groups = group_size > 0 ? p.head_dim / group_size : 1;
  QuantizeParams q;
  q.outer = sizes[0], q.seqlen = sizes[1], q.heads = sizes[2], q.head_dim = sizes[3];
  q.dtype = p.dtype, q.element = element, q.granularity = granularity, q.group_size = group_size;
  q.set_contiguous_strides();  // the scales' strides
  q.x_strides = q.value_strides = cs;
  const std::int64_t scales = granularity == ScaleGranularity::kPerToken ? sizes[0] * sizes[1] * sizes[2] * groups
                              : granularity == ScaleGranularity::kPerHead ? sizes[2]
                                                                          : 1;
  for (const bool key : {true, false}) {
    Tensor& cache = key ? call.k_cache : call.v_cache;
    Tensor bytes = cache;
    bytes.bytes.resize(cache.bytes.size() / size_of(p.dtype));
    for (auto& byte : bytes.bytes) byte = static_cast<unsigned char>(rng.Next());  // junk between elements
    std::vector<float>& scale = key ? call.k_scale : call.v_scale;
    scale.assign(static_cast<std::size_t>(scales), kNaN);
    q.x = cache.data(), q.values = bytes.data(), q.scales = scale.data();
    quantize_kv(q);
    cache = std::move(bytes);
  }
  p.cache_element = element, p.scale_granularity = granularity, p.scale_group_size = group_size;
  p.scale_strides = q.scale_strides;
  p.k_cache = call.k_cache.data(), p.v_cache = call.v_cache.data();
  p.k_scale = call.k_scale.data(), p.v_scale = call.v_scale.data();
  p.quantize_query_int8 = element == CacheElement::kInt8 && in.Bool();
  p.quantize_probs_u8 = element == CacheElement::kInt8 && group_size == 0 && in.Bool();
}

// V read inside the K rows (multi-head latent attention): the first dv ≤ d features of each K row, with K's scales
// (v_scale null or k_scale) and dv a multiple of their groups; appends pass k_new alone. O keeps its drawn rows of
// d elements, of which dv are written: the rest are checked as lying between O's elements.
void ReadValuesInsideKeys(FuzzInput& in, DecodeCall& call) {
  DecodeParams& p = call.params;
  const bool quantized = Quantized(p.cache_element);
  const std::int64_t g = quantized ? ScaleGroupSize(p.scale_group_size, p.head_dim) : p.head_dim;
  const std::int64_t dv = g == p.head_dim ? in.Range(1, p.head_dim) : g * in.Range(1, p.head_dim / g);
  call.values_in_keys = true;
  p.head_dim_v = dv;
  p.v_cache = p.k_cache;
  p.v_scale = quantized && in.Bool() ? p.k_scale : nullptr;
  p.v_new = nullptr;
  call.o.sizes[3] = dv;
}

void DrawRotary(FuzzInput& in, Rng& rng, DecodeCall& call) {
  DecodeParams& p = call.params;
  p.rotary_dim = 2 * in.Range(1, p.head_dim / 2);
  p.rotary_interleaved = in.Bool();
  std::int64_t positions = 0;
  for (std::int32_t cached : call.cache_seqlens)
    positions = std::max(positions, cached + std::max(p.seqlen_new, p.seqlen_q));
  p.rotary_max_pos = positions + in.Range(0, 2);
  const std::int64_t half = p.rotary_dim / 2;
  call.cos.resize(p.rotary_max_pos * half), call.sin.resize(p.rotary_max_pos * half);
  for (std::int64_t n = 0; n < p.rotary_max_pos * half; ++n) {
    const double angle = 6.283185307179586 * rng.Uniform();
    call.cos[n] = static_cast<float>(std::cos(angle)), call.sin[n] = static_cast<float>(std::sin(angle));
  }
  p.rotary_cos = call.cos.empty() ? nullptr : call.cos.data();
  p.rotary_sin = call.sin.empty() ? nullptr : call.sin.data();
}

// One value the API must reject; "" if the chosen kind does not apply to this call.
std::string InjectInvalid(FuzzInput& in, DecodeCall& call) {
  DecodeParams& p = call.params;
  const bool o_nonempty = !call.o.Empty(), cache_nonempty = !call.k_cache.Empty();
  switch (in.Range(0, 20)) {
    case 0:
      if (p.batch < 1) return "";
      call.cache_seqlens[in.Range(0, p.batch - 1)] = -in.Range(1, 3);
      return "negative cache_seqlens";
    case 1:
      if (p.batch < 1) return "";
      call.cache_seqlens[in.Range(0, p.batch - 1)] = static_cast<std::int32_t>(call.capacity - p.seqlen_new + 1);
      return "cache_seqlens + seqlen_new beyond the capacity";
    case 2: {
      if (!p.paged() || p.batch < 1) return "";
      const std::int64_t b = in.Range(0, p.batch - 1);
      const std::int64_t used = (call.cache_seqlens[b] + p.seqlen_new + p.page_size - 1) / p.page_size;
      if (used == 0) return "";
      call.block_table[b * p.block_table_stride + in.Range(0, used - 1)] =
          in.Pick<std::int32_t>({-1, static_cast<std::int32_t>(p.num_pages), INT32_MIN});
      return "block_table entry out of range";
    }
    case 3: {  // sequence 1 appends to the page and slot where sequence 0 appends
      if (!p.paged() || p.batch < 2 || p.seqlen_new == 0) return "";
      call.cache_seqlens[1] = call.cache_seqlens[0];
      const std::int64_t n = call.cache_seqlens[0] / p.page_size;
      call.block_table[p.block_table_stride + n] = call.block_table[n];
      return "two appended keys in one cache slot";
    }
    case 4: p.rotary_dim = in.Bool() ? p.head_dim + 2 : 1; return "rotary_dim odd or above head_dim";
    case 5: {
      if (p.rotary_dim == 0) return "";
      std::int64_t positions = 0;  // the positions the tables must cover
      for (std::int32_t cached : call.cache_seqlens)
        positions = std::max(positions, cached + std::max(p.seqlen_new, p.seqlen_q));
      if (positions == 0) return "";
      p.rotary_max_pos = in.Range(0, positions - 1);
      return "rotary tables shorter than the positions";
    }
    case 6:
      p.cache_element = static_cast<CacheElement>(in.Range(static_cast<int>(kLastCacheElement) + 1, 255));
      return "unknown cache_element";
    case 7:
      if (!cache_nonempty) return "";
      p.k_cache = nullptr;
      return "null k_cache";
    case 8:
      if (!p.paged()) return "";
      p.page_size = 0;
      return "page_size 0";
    case 9: p.num_splits = -in.Range(1, 3); return "negative num_splits";
    case 10: p.heads_kv = p.heads_q + 1; return "heads_q not a multiple of heads_kv";
    case 11: p.window_left = -2; return "window_left below -1";
    case 12: p.softcap = in.Pick({kNaN, -kInf, -2.0f}); return "softcap";
    case 13: p.scale = in.Pick({kInf, kNaN}); return "scale not finite";
    case 14:
      if (!o_nonempty || !cache_nonempty) return "";
      p.o = p.k_cache;
      return "o overlapping k_cache";
    case 15:
      if (p.batch < 1) return "";
      p.cache_seqlens = nullptr;
      return "null cache_seqlens";
    case 16:
      if (p.seqlen_new == 0 || p.batch < 1) return "";
      p.k_new = nullptr;
      return "null k_new";
    case 17: p.num_threads = -1; return "negative num_threads";
    case 18: p.head_dim = in.Pick<std::int64_t>({0, kMaxHeadDim + 1}); return "head_dim out of range";
    case 19:
      if (!p.paged() || p.batch < 2 || p.max_pages == 0) return "";
      p.block_table_stride = p.max_pages - 1;
      return "block_table_stride below max_pages";
    default: p.seqlen_new = -1; return "negative seqlen_new";
  }
}

void DrawCall(FuzzInput& in, DecodeCall& call) {
  DecodeParams& p = call.params;
  p.dtype = p.cache_dtype = in.Pick({DType::kF32, DType::kF16, DType::kBF16});
  p.batch = in.OneIn(16) ? 0 : in.Range(1, 3);
  p.seqlen_q = in.OneIn(16) ? 0 : in.Range(1, 4);
  p.seqlen_new = in.OneIn(3) ? 0 : in.Range(1, 4);
  p.heads_kv = in.Range(1, 3);
  p.heads_q = p.heads_kv * in.Range(1, 3);
  p.head_dim = in.Range(1, 70);
  std::int64_t needed = 0;  // keys of the longest sequence after the append
  for (std::int64_t b = 0; b < p.batch; ++b) {
    call.cache_seqlens.push_back(static_cast<std::int32_t>(in.OneIn(8) ? 0 : in.Range(0, 40)));
    needed = std::max(needed, call.cache_seqlens.back() + p.seqlen_new);
  }
  p.cache_seqlens = call.cache_seqlens.empty() ? nullptr : call.cache_seqlens.data();

  p.causal = in.OneIn(3);
  if (in.OneIn(3)) p.window_left = in.Range(-1, 45);
  if (in.OneIn(3)) p.window_right = in.Range(-1, 45);
  if (in.OneIn(4)) p.softcap = in.Pick({0.5f, 5.0f, 30.0f});
  if (in.OneIn(3)) p.scale = in.Pick({0.0f, 0.05f, 0.3f, -0.3f, 1.0f, 4.0f});
  p.num_splits = in.OneIn(8) ? 64 : in.Range(0, 9);
  p.num_threads = static_cast<int>(in.Range(0, 3));
  const bool rotary = p.head_dim >= 2 && in.OneIn(3);
  const int alibi = static_cast<int>(in.Range(0, 3));
  const bool want_lse = !in.OneIn(4);
  const float input_scale = in.Pick({1.0f, 2.0f, 4.0f});

  Rng rng(in.U64());
  DrawCache(in, rng, call, needed);
  call.q = DrawTensor(in, {p.batch, p.seqlen_q, p.heads_q, p.head_dim}, p.dtype, /*input=*/true);
  call.k_new = DrawTensor(in, {p.batch, p.seqlen_new, p.heads_kv, p.head_dim}, p.dtype, true);
  call.v_new = call.k_new;  // new_strides describe both
  call.o = DrawTensor(in, {p.batch, p.seqlen_q, p.heads_q, p.head_dim}, p.dtype, /*input=*/false);
  FillRandom(call.q, rng, input_scale);
  FillRandom(call.k_new, rng, input_scale);
  FillRandom(call.v_new, rng, 1.0f);
  p.q = call.q.data(), p.o = call.o.data();
  if (p.seqlen_new > 0 || in.Bool()) p.k_new = call.k_new.data(), p.v_new = call.v_new.data();
  p.q_strides = call.q.strides, p.new_strides = call.k_new.strides, p.o_strides = call.o.strides;
  if (rotary) DrawRotary(in, rng, call);
  if (want_lse) {
    call.lse.resize(p.batch * p.heads_q * p.seqlen_q);
    std::fill_n(reinterpret_cast<unsigned char*>(call.lse.data()), call.lse.size() * sizeof(float), kPattern);
    p.lse = call.lse.empty() ? nullptr : call.lse.data();
  }
  if (alibi > 0) {  // 1: per head; 2, 3: per (batch, head), rows padded
    p.alibi_batch_stride = alibi == 1 ? 0 : p.heads_q + (alibi - 2);
    call.alibi.resize(alibi == 1 ? p.heads_q : p.batch * p.alibi_batch_stride);
    for (float& slope : call.alibi) slope = rng.Uniform() * (in.OneIn(4) ? -0.1f : 1.0f);
    p.alibi_slopes = call.alibi.empty() ? nullptr : call.alibi.data();
  }
  if (in.OneIn(4)) call.invalid = InjectInvalid(in, call);
}

double UnitRoundoff(DType dtype) {
  return dtype == DType::kF16 ? 0x1p-11 : dtype == DType::kBF16 ? 0x1p-8 : 0x1p-24;
}

// (1): every cache byte (and scale) outside the appended slots is unchanged; the appended rows hold
// rotary(k_new) and v_new (rotation within rounding; quantized, within the rounding of the element).
void CheckCaches(const DecodeCall& call, const Tensor& k_before, const Tensor& v_before,
                 const std::vector<float>& k_scales_before, const std::vector<float>& v_scales_before,
                 const std::string& what) {
  const DecodeParams& p = call.params;
  const double u_out = UnitRoundoff(p.dtype), u = 0x1p-24;
  std::vector<bool> appended(call.k_cache.bytes.size(), false);
  const bool quantized = Quantized(p.cache_element);
  const std::int64_t elem = quantized ? 1 : static_cast<std::int64_t>(size_of(p.dtype));
  const Strides scale_strides = ScaleStridesOf(p);
  const std::int64_t g = ScaleGroupSize(p.scale_group_size, p.head_dim);
  std::vector<bool> appended_scale(call.k_scale.size(), false);
  for (std::int64_t b = 0; b < p.batch; ++b) {
    for (std::int64_t i = 0; i < p.seqlen_new; ++i) {
      const std::int64_t j = call.cache_seqlens[b] + i;
      const auto [outer, slot] = CacheSlot(call, b, j);
      for (std::int64_t hk = 0; hk < p.heads_kv; ++hk) {
        const std::vector<double> k = Row(call.k_new, b, i, hk);
        for (std::int64_t c = 0; c < p.head_dim; ++c) {
          const std::int64_t offset = call.k_cache.Offset(outer, slot, hk, c);
          std::fill_n(appended.begin() + offset * elem, elem, true);
          // A quantized row's scale; per token, the append writes it
          const std::int64_t at =
              outer * scale_strides.batch + slot * scale_strides.seq + hk * scale_strides.head + c / g;
          if (quantized && p.scale_granularity == ScaleGranularity::kPerToken) appended_scale[at] = true;
          if (!call.values_in_keys) {
            const double v = call.v_new.Get(b, i, hk, c);
            const double v_error = std::fabs(CacheValue(call, false, outer, slot, hk, c) - v);
            const double v_bound = quantized ? QuantizedStoreError(p.cache_element, call.v_scale[at], v) : 0.0;
            if (!(v_error <= v_bound)) {
              Fail(what + ": v_new not appended at sequence " + std::to_string(b) + " key " + std::to_string(j));
            }
          }
          const double expected = Rotated(call, k, c, j);
          bool first;
          const double magnitude =
              c < p.rotary_dim ? std::fabs(k[c]) + std::fabs(k[RotaryPartner(c, p.rotary_dim, p.rotary_interleaved,
                                                                             &first)])
                               : 0.0;
          const double stored = CacheValue(call, true, outer, slot, hk, c);
          const double rotation = 2 * (u_out * std::fabs(expected) + 2 * u * magnitude);
          const double error = std::fabs(stored - expected);
          const double bound =
              quantized ? QuantizedStoreError(p.cache_element, call.k_scale[at], expected) + rotation : rotation;
          if (!(error <= bound)) {
            Fail(what + ": appended key of sequence " + std::to_string(b) + " position " + std::to_string(j) +
                 " feature " + std::to_string(c) + " is " + std::to_string(stored) + ", expected " +
                 std::to_string(expected));
          }
        }
      }
    }
  }
  for (std::size_t n = 0; n < appended.size(); ++n) {
    if (!appended[n] && (call.k_cache.bytes[n] != k_before.bytes[n] || call.v_cache.bytes[n] != v_before.bytes[n])) {
      Fail(what + ": a cache byte outside the appended slots changed (byte " + std::to_string(n) + ")");
    }
  }
  for (std::size_t n = 0; n < appended_scale.size(); ++n) {
    if (!appended_scale[n] && (std::memcmp(&call.k_scale[n], &k_scales_before[n], sizeof(float)) != 0 ||
                               std::memcmp(&call.v_scale[n], &v_scales_before[n], sizeof(float)) != 0)) {
      Fail(what + ": a scale outside the appended slots changed (scale " + std::to_string(n) + ")");
    }
  }
}

// (2): per sequence, forward semantics over the cache after the call, checked against the oracle.
void CheckOutputs(const DecodeCall& call, const std::string& what) {
  const DecodeParams& p = call.params;
  const std::int64_t Hq = p.heads_q, Hkv = p.heads_kv, d = p.head_dim, dv = p.value_head_dim(), Nq = p.seqlen_q;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t Nk = call.cache_seqlens[b] + p.seqlen_new;
    std::vector<float> q(Nq * Hq * d), q_bound(Nq * Hq * d), o(Nq * Hq * dv), k(Nk * Hkv * d), v(Nk * Hkv * dv);
    for (std::int64_t i = 0; i < Nq; ++i)
      for (std::int64_t h = 0; h < Hq; ++h) {
        const std::vector<double> row = Row(call.q, b, i, h);
        for (std::int64_t c = 0; c < d; ++c) {
          const std::int64_t n = (i * Hq + h) * d + c;
          q[n] = static_cast<float>(p.rotary_dim > 0 ? Rotated(call, row, c, call.cache_seqlens[b] + i) : row[c]);
          bool first;
          q_bound[n] = static_cast<float>(
              std::fabs(row[c]) +
              (c < p.rotary_dim ? std::fabs(row[RotaryPartner(c, p.rotary_dim, p.rotary_interleaved, &first)]) : 0));
        }
        for (std::int64_t c = 0; c < dv; ++c) o[(i * Hq + h) * dv + c] = call.o.Get(b, i, h, c);
      }
    for (std::int64_t j = 0; j < Nk; ++j) {
      const auto [outer, slot] = CacheSlot(call, b, j);
      for (std::int64_t hk = 0; hk < Hkv; ++hk)
        for (std::int64_t c = 0; c < d; ++c) {
          k[(j * Hkv + hk) * d + c] = CacheValue(call, true, outer, slot, hk, c);
          if (c < dv) v[(j * Hkv + hk) * dv + c] = CacheValue(call, false, outer, slot, hk, c);
        }
    }
    AttentionParams f;
    f.q = q.data(), f.k = k.data(), f.v = v.data(), f.o = o.data();
    f.lse = p.lse ? p.lse + b * Hq * Nq : nullptr;
    f.batch = 1, f.seqlen_q = Nq, f.seqlen_k = Nk, f.heads_q = Hq, f.heads_kv = Hkv, f.head_dim = d;
    f.head_dim_v = dv;
    f.scale = p.scale, f.causal = p.causal, f.window_left = p.window_left, f.window_right = p.window_right;
    f.softcap = p.softcap;
    if (p.alibi_slopes) f.alibi_slopes = p.alibi_slopes + b * p.alibi_batch_stride;
    f.set_contiguous_strides();
    // The kernel rotates q itself (maybe rounding it to the element type): each rotated element is within
    // (2·u_out + 4u)·(|x0| + |x1|) of the exact rotation.
    double q_error = p.rotary_dim > 0 ? 2 * UnitRoundoff(p.dtype) + 4 * 0x1p-24 : 0.0;
    if (p.quantize_query_int8) {  // each query rounded per scale group: within max|q_group| / 254 of it
      const std::int64_t g = ScaleGroupSize(p.scale_group_size, d);
      for (std::int64_t row = 0; row < Nq * Hq; ++row)
        for (std::int64_t c0 = 0; c0 < d; c0 += g) {
          float group_max = 0.0f;
          for (std::int64_t c = c0; c < c0 + g; ++c) group_max = std::max(group_max, std::fabs(q[row * d + c]));
          for (std::int64_t c = c0; c < c0 + g; ++c) q_bound[row * d + c] += group_max;
        }
      q_error += 1.01 / 254;
    }
    // u8-rounded weights of P̃V: in each block the kernel gains Σ_j (max w / 255)·u_j·v8_jc for
    // Σ_j w_j·v8_jc, w_j = P̃_j·v_scale_j, with |w_j − u_j·max w / 255| ≤ max w / 510. As P̃ ≤ 1,
    // max w·|v8_jc| ≤ max_j' v_scale_j'·127 = max_j'c' |v_j'c'| over the visible keys (a per-token scale is
    // max|row| / 127; a per-head or per-tensor one is shared, so max w·|v8_jc| ≤ |v_jc|), and l ≥ 1, so
    // |ΔO_ic| ≤ (keys row i sees)·max_jc |v_jc| / 510; 1.01 covers the float rounding of 255·w_j / max w. With V
    // inside the K rows a row's scale is that of its whole K row: the bound takes the largest |k_jc| instead.
    const double weight_error = p.quantize_probs_u8 ? 1.01 / 510 : 0.0;
    const std::string error = CheckAgainstOracle(f, {.output = p.dtype,
                                                     .q_error = q_error,
                                                     .q_bound = q_bound.data(),
                                                     .weight_error = weight_error,
                                                     .weights_over_key_rows = call.values_in_keys});
    if (!error.empty()) Fail(what + ": sequence " + std::to_string(b) + " (" + std::to_string(Nk) + " keys): " + error);
  }
}

void Run(const std::uint8_t* data, std::size_t size) {
  FuzzInput in(data, size);
  DecodeCall call;
  DrawCall(in, call);
  const ScopedSimdTarget simd_target(in);
  // Read after every other choice, so that an input that ends before it decodes to the float call it did
  Rng quantize_rng(in.U64());
  if (call.invalid.empty() && in.Range(0, 2) == 1) QuantizeCaches(in, quantize_rng, call);
  if (call.invalid.empty() && call.params.k_cache != nullptr && in.Range(0, 3) == 1) ReadValuesInsideKeys(in, call);
  const DecodeParams& p = call.params;
  const std::string what = std::string(to_string(p.dtype)) + (p.paged() ? " paged" : " contiguous") +
                           (Quantized(p.cache_element) ? std::string(" ") + std::string(to_string(p.cache_element)) +
                                                             "/" + std::string(to_string(p.scale_granularity)) +
                                                             (p.quantize_query_int8 ? " integer scores" : "") +
                                                             (p.quantize_probs_u8 ? " u8 probabilities" : "")
                                                       : std::string()) +
                           (call.values_in_keys ? " V inside K (dv " + std::to_string(p.value_head_dim()) + ")" : "") +
                           " on " + simd_target.Name() +
                           (call.invalid.empty() ? "" : " with " + call.invalid);
  const DecodeCall before = call;
  const bool threw = CheckValidateAgreesWithCall(p, call.invalid, what, "decode", [&] { decode(p); });
  if (call.q.bytes != before.q.bytes || call.k_new.bytes != before.k_new.bytes ||
      call.v_new.bytes != before.v_new.bytes || call.cache_seqlens != before.cache_seqlens ||
      call.block_table != before.block_table || call.alibi != before.alibi || call.cos != before.cos ||
      call.sin != before.sin) {
    Fail(what + ": an input changed");
  }
  if (threw) {
    if (call.k_cache.bytes != before.k_cache.bytes || call.v_cache.bytes != before.v_cache.bytes ||
        !SameBits(call.k_scale, before.k_scale) || !SameBits(call.v_scale, before.v_scale) ||
        !AllPattern(call.o.bytes.data(), call.o.bytes.size()) ||
        !AllPattern(call.lse.data(), call.lse.size() * sizeof(float))) {
      Fail(what + ": a rejected call wrote to the caches, O or LSE");
    }
    return;
  }
  CheckNothingWrittenBetweenElements(call.o, what);
  CheckCaches(call, before.k_cache, before.v_cache, before.k_scale, before.v_scale, what);
  CheckOutputs(call, what);
}

}  // namespace
}  // namespace flashattn::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  flashattn::fuzz::Run(data, size);
  return 0;
}
