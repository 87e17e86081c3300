// decode() with packed queries (DecodeParams::cu_seqlens_q): any number of query rows per sequence over a
// paged or contiguous cache, each sequence against the float64 oracle over its own cache contents, within
// twice the error of a plain three-pass float32 computation over the same (dequantized) cache; the packed
// call equal to the batched one where both apply; hostile input rejected before anything is written.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/constants.h"
#include "common/element.h"
#include "common/quantize.h"
#include "common/rotary.h"
#include "common/score.h"
#include "flashattn/decode.h"

namespace flashattn::testing {
namespace {

struct VarlenShape {
  std::vector<std::int32_t> rows;  // Nq_b
  std::vector<std::int32_t> keys;  // Nk_b, after the append
  std::int64_t Hq = 2, Hkv = 2, d = 64, dv = 0;  // dv > 0: V is the first dv features of the K rows
  std::int64_t page_size = 0;                    // 0 = contiguous
  bool append = false;
  DType dtype = DType::kF32;  // of q, k_new, v_new, o
  CacheElement element = CacheElement::kFloat;
  DType cache_dtype = DType::kF32;

  std::string ToString() const {
    std::ostringstream s;
    s << "hq" << Hq << "_hkv" << Hkv << "_d" << d << "_dv" << dv << "_page" << page_size << "_append" << append
      << "_" << to_string(dtype) << "_" << to_string(element) << "_" << to_string(cache_dtype);
    return s.str();
  }
};

struct VarlenMods {
  bool causal = true;
  std::int64_t window_left = -1;
  float softcap = 0.0f;
  bool sinks = false;
  std::int64_t num_splits = 0;
  bool alibi = false;       // slopes 0.05·(h + 1)
  bool rotary = false;      // over half of the head dimension, non-interleaved
  bool keys_after = false;  // sequence b continues 3b + 2 keys past its cache
};

// A packed decode problem that owns its buffers: Gaussian cache values (quantized with quantize_kv for a
// quantized cache), queries and appended rows; paged caches take shuffled pages among unused ones.
class VarlenCase {
 public:
  VarlenCase(const VarlenShape& shape, const VarlenMods& mods, std::uint64_t seed) : shape_(shape) {
    DecodeParams& p = params_;
    const auto B = static_cast<std::int64_t>(shape.rows.size());
    p.batch = B, p.heads_q = shape.Hq, p.heads_kv = shape.Hkv, p.head_dim = shape.d, p.dtype = shape.dtype;
    if (shape.dv > 0) p.head_dim_v = shape.dv;
    p.causal = mods.causal, p.window_left = mods.window_left, p.softcap = mods.softcap;
    p.num_splits = mods.num_splits;
    p.cache_element = shape.element, p.cache_dtype = shape.cache_dtype;
    p.scale_granularity = default_scale_granularity(shape.element);
    cu_.assign(1, 0);
    for (std::int64_t b = 0; b < B; ++b) {
      cu_.push_back(cu_.back() + shape.rows[b]);
      cached_.push_back(shape.keys[b] - (shape.append ? shape.rows[b] : 0));
    }
    p.cu_seqlens_q = cu_.data(), p.cache_seqlens = cached_.data();
    p.seqlen_q = *std::max_element(shape.rows.begin(), shape.rows.end());
    p.seqlen_new = shape.append ? p.seqlen_q : 0;
    std::mt19937_64 rng(seed);
    const std::int64_t capacity = std::max<std::int64_t>(1, *std::max_element(shape.keys.begin(), shape.keys.end()));
    std::int64_t outer = B, slots = capacity;
    if (shape.page_size > 0) {
      p.page_size = slots = shape.page_size;
      p.max_pages = p.block_table_stride = (capacity + shape.page_size - 1) / shape.page_size;
      p.num_pages = outer = B * p.max_pages + 2;
      table_.resize(B * p.max_pages);
      std::iota(table_.begin(), table_.end(), 1);
      std::shuffle(table_.begin(), table_.end(), rng);
      p.block_table = table_.data();
    } else {
      p.cache_seqlen_max = capacity;
    }
    p.set_contiguous_strides();
    std::normal_distribution<float> normal;
    const std::int64_t cache_elements = outer * slots * shape.Hkv * shape.d;
    std::vector<float> k(cache_elements), v(cache_elements);
    for (float& x : k) x = normal(rng);
    for (float& x : v) x = normal(rng);
    FillCache(k, k_cache_, k_scale_, outer, slots);
    FillCache(v, v_cache_, v_scale_, outer, slots);
    const bool inside = shape.dv > 0;
    p.k_cache = k_cache_.data(), p.v_cache = inside ? p.k_cache : v_cache_.data();
    if (Quantized(shape.element)) p.k_scale = k_scale_.data(), p.v_scale = inside ? nullptr : v_scale_.data();

    const std::int64_t total_q = cu_.back(), dv = p.value_head_dim();
    const auto fill = [&](std::vector<std::uint8_t>& buffer, std::int64_t count) {
      buffer.resize(std::max<std::int64_t>(1, count) * size_of(shape.dtype));
      for (std::int64_t n = 0; n < count; ++n) StoreFromFloat(buffer.data(), shape.dtype, n, normal(rng));
    };
    fill(q_, total_q * shape.Hq * shape.d);
    fill(k_new_, total_q * shape.Hkv * shape.d);
    fill(v_new_, total_q * shape.Hkv * shape.d);
    p.q = q_.data();
    if (shape.append) p.k_new = k_new_.data(), p.v_new = inside ? nullptr : v_new_.data();
    o_.assign(std::max<std::int64_t>(1, total_q * shape.Hq * dv) * size_of(shape.dtype), 0xA5);
    lse_.assign(std::max<std::int64_t>(1, total_q * shape.Hq), 7.0f);
    p.o = o_.data(), p.lse = lse_.data();
    if (mods.sinks) {
      for (std::int64_t h = 0; h < shape.Hq; ++h) sinks_.push_back(h % 2 == 0 ? normal(rng) : kNegInf);
      p.sinks = sinks_.data();
    }
    SetPositionModifiers(mods, capacity + p.seqlen_q);
  }
  VarlenCase(const VarlenCase&) = delete;
  VarlenCase& operator=(const VarlenCase&) = delete;

  DecodeParams& params() { return params_; }
  const VarlenShape& shape() const { return shape_; }
  std::vector<std::int32_t>& table() { return table_; }
  std::vector<std::int32_t>& cu() { return cu_; }
  std::vector<std::int32_t>& cached() { return cached_; }

  float O(std::int64_t row, std::int64_t h, std::int64_t e) const {
    const std::int64_t dv = params_.value_head_dim();
    return LoadAsFloat(o_.data(), shape_.dtype, (row * shape_.Hq + h) * dv + e);
  }
  float Lse(std::int64_t row, std::int64_t h) const { return lse_[h * cu_.back() + row]; }

  // Every byte the call may write: the caches, their scales, o and (with_lse) lse.
  std::vector<std::uint8_t> Bytes(bool with_lse = true) const {
    std::vector<std::uint8_t> bytes = k_cache_;
    bytes.insert(bytes.end(), v_cache_.begin(), v_cache_.end());
    bytes.insert(bytes.end(), o_.begin(), o_.end());
    for (const std::vector<float>* floats : {&k_scale_, &v_scale_, with_lse ? &lse_ : &k_scale_}) {
      const auto* first = reinterpret_cast<const std::uint8_t*>(floats->data());
      bytes.insert(bytes.end(), first, first + floats->size() * sizeof(float));
    }
    return bytes;
  }

  // Cache row (b, j, hk) of K or V after the call, as float32 (dequantized).
  std::vector<float> CacheRow(bool key, std::int64_t b, std::int64_t j, std::int64_t hk) const {
    const DecodeParams& p = params_;
    const std::int64_t outer = p.paged() ? table_[b * p.max_pages + j / p.page_size] : b;
    const std::int64_t slot = p.paged() ? j % p.page_size : j;
    const Strides& c = p.cache_strides;
    const Strides s = ScaleStridesOf(p);
    const bool k_row = key || shape_.dv > 0;
    const std::vector<float>& scales = k_row ? k_scale_ : v_scale_;
    const float* row_scales = scales.empty() ? nullptr : scales.data() + outer * s.batch + slot * s.seq + hk * s.head;
    std::vector<float> row(key ? p.head_dim : p.value_head_dim());
    LoadCacheRow(p, k_row ? k_cache_.data() : v_cache_.data(), row_scales, outer * c.batch + slot * c.seq + hk * c.head,
                 row.data(), static_cast<std::int64_t>(row.size()));
    return row;
  }
  // Query row `row` (of sequence b, its i-th) of head h, rotated at position cache_seqlens[b] + i and rounded
  // to dtype as the library rotates queries.
  std::vector<float> QRow(std::int64_t b, std::int64_t i, std::int64_t h) const {
    const DecodeParams& p = params_;
    const std::int64_t row = cu_[b] + i;
    std::vector<float> q(shape_.d);
    for (std::int64_t e = 0; e < shape_.d; ++e) q[e] = LoadAsFloat(q_.data(), shape_.dtype, (row * shape_.Hq + h) * shape_.d + e);
    if (p.rotary_dim > 0) {
      const std::int64_t pos = (cached_[b] + i) * (p.rotary_dim / 2);
      ApplyRotary(q.data(), p.rotary_dim, p.rotary_cos + pos, p.rotary_sin + pos, p.rotary_interleaved);
      for (float& x : q) x = RoundTo(shape_.dtype, x);
    }
    return q;
  }

 private:
  void SetPositionModifiers(const VarlenMods& mods, std::int64_t positions) {
    DecodeParams& p = params_;
    if (mods.alibi) {
      for (std::int64_t h = 0; h < shape_.Hq; ++h) slopes_.push_back(0.05f * static_cast<float>(h + 1));
      p.alibi_slopes = slopes_.data();
    }
    if (mods.keys_after) {
      for (std::int64_t b = 0; b < p.batch; ++b) after_.push_back(static_cast<std::int32_t>(3 * b + 2));
      p.keys_after = after_.data();
    }
    if (mods.rotary) {
      p.rotary_dim = shape_.d / 4 * 2, p.rotary_max_pos = positions, p.rotary_interleaved = false;
      for (std::int64_t pos = 0; pos < positions; ++pos)
        for (std::int64_t f = 0; f < p.rotary_dim / 2; ++f) {
          const double angle = static_cast<double>(pos) * std::pow(10000.0, -2.0 * f / p.rotary_dim);
          cos_.push_back(static_cast<float>(std::cos(angle)));
          sin_.push_back(static_cast<float>(std::sin(angle)));
        }
      p.rotary_cos = cos_.data(), p.rotary_sin = sin_.data();
    }
  }

  // A cache of the shape's element type holding `values` (rounded, or quantized with its scales).
  void FillCache(const std::vector<float>& values, std::vector<std::uint8_t>& cache, std::vector<float>& scales,
                 std::int64_t outer, std::int64_t slots) {
    const std::int64_t count = static_cast<std::int64_t>(values.size());
    if (!Quantized(shape_.element)) {
      cache.resize(count * size_of(shape_.cache_dtype));
      for (std::int64_t n = 0; n < count; ++n) StoreFromFloat(cache.data(), shape_.cache_dtype, n, values[n]);
      return;
    }
    cache.resize(count);
    QuantizeParams q;
    q.outer = outer, q.seqlen = slots, q.heads = shape_.Hkv, q.head_dim = shape_.d;
    q.element = shape_.element, q.granularity = params_.scale_granularity;
    q.set_contiguous_strides();
    scales.assign(q.granularity == ScaleGranularity::kPerToken ? outer * slots * shape_.Hkv : shape_.Hkv, 0.0f);
    q.x = values.data(), q.values = cache.data(), q.scales = scales.data();
    quantize_kv(q);
    params_.scale_strides = q.scale_strides;
  }

  VarlenShape shape_;
  DecodeParams params_;
  std::vector<std::uint8_t> q_, k_new_, v_new_, k_cache_, v_cache_, o_;
  std::vector<float> k_scale_, v_scale_, lse_, sinks_, slopes_, cos_, sin_;
  std::vector<std::int32_t> cu_, cached_, table_, after_;
};

// Attention of every packed row over its sequence's cache (after the call), in T: float64 for the oracle,
// float32 for the plain three-pass computation (scores, then max and sum, then the normalized P V), whose O is
// rounded to the output type. O (total_q, Hq, dv), LSE (Hq, total_q).
struct Result {
  std::vector<double> O, lse;
};

template <typename T>
Result ThreePass(const VarlenCase& c, const VarlenMods& mods) {
  const VarlenShape& s = c.shape();
  DecodeParams p = const_cast<VarlenCase&>(c).params();
  const std::int64_t dv = p.value_head_dim(), G = s.Hq / s.Hkv, total_q = p.total_query_rows();
  const float scale = SoftmaxScale(p);
  Result r{std::vector<double>(total_q * s.Hq * dv), std::vector<double>(total_q * s.Hq)};
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t Nq = s.rows[b], Nk = s.keys[b], first = p.cu_seqlens_q[b];
    std::vector<std::vector<float>> K(Nk * s.Hkv), V(Nk * s.Hkv);
    for (std::int64_t j = 0; j < Nk; ++j)
      for (std::int64_t hk = 0; hk < s.Hkv; ++hk) K[j * s.Hkv + hk] = c.CacheRow(true, b, j, hk), V[j * s.Hkv + hk] = c.CacheRow(false, b, j, hk);
    for (std::int64_t i = 0; i < Nq; ++i)
      for (std::int64_t h = 0; h < s.Hq; ++h) {
        const std::vector<float> q = c.QRow(b, i, h);
        const std::int64_t after = p.keys_after == nullptr ? 0 : p.keys_after[b];
        const std::int64_t diagonal = Nk + after - Nq + i, hk = h / G;
        const float slope = p.alibi_slopes == nullptr ? 0.0f : p.alibi_slopes[h];
        std::vector<T> S(Nk, kNegInfOf<T>);
        T m = p.sinks == nullptr ? kNegInfOf<T> : static_cast<T>(p.sinks[h]);
        for (std::int64_t j = 0; j < Nk; ++j) {
          const bool seen = (!mods.causal || j <= diagonal) && (mods.window_left < 0 || j >= diagonal - mods.window_left);
          if (!seen) continue;
          T dot = 0;
          for (std::int64_t e = 0; e < s.d; ++e) dot += static_cast<T>(q[e]) * static_cast<T>(K[j * s.Hkv + hk][e]);
          S[j] = ModifiedScore<T>(dot, static_cast<float>(scale), mods.softcap, slope, std::abs(diagonal - j));
          m = std::max(m, S[j]);
        }
        double* O = &r.O[((first + i) * s.Hq + h) * dv];
        double& lse = r.lse[h * total_q + first + i];
        if (m == kNegInfOf<T>) {
          lse = kNegInfOf<double>;
          continue;
        }
        T l = p.sinks == nullptr ? T{0} : std::exp(static_cast<T>(p.sinks[h]) - m);
        for (std::int64_t j = 0; j < Nk; ++j) l += S[j] == kNegInfOf<T> ? T{0} : std::exp(S[j] - m);
        std::vector<T> acc(dv, T{0});
        for (std::int64_t j = 0; j < Nk; ++j) {
          if (S[j] == kNegInfOf<T>) continue;
          const T P = std::exp(S[j] - m) / l;
          for (std::int64_t e = 0; e < dv; ++e) acc[e] += P * static_cast<T>(V[j * s.Hkv + hk][e]);
        }
        for (std::int64_t e = 0; e < dv; ++e) {
          O[e] = std::is_same_v<T, double> ? acc[e] : RoundTo(s.dtype, static_cast<float>(acc[e]));
        }
        lse = static_cast<double>(m + std::log(l));
      }
  }
  return r;
}

// max|O − O_ref| / max|O_ref| over every row; the largest LSE difference (−∞ must match exactly).
struct Errors {
  double o = 0.0, lse = 0.0;
};
Errors ErrorsOf(const std::vector<double>& O, const std::vector<double>& lse, const Result& ref) {
  double diff = 0.0, size = 0.0;
  for (std::size_t n = 0; n < O.size(); ++n) {
    const double delta = std::fabs(O[n] - ref.O[n]);
    diff = std::isnan(delta) ? INFINITY : std::max(diff, delta);
    size = std::max(size, std::fabs(ref.O[n]));
  }
  Errors e{size > 0 ? diff / size : diff, 0.0};
  for (std::size_t n = 0; n < lse.size(); ++n) {
    if (std::isinf(ref.lse[n]) || std::isinf(lse[n])) {
      if (lse[n] != ref.lse[n]) e.lse = INFINITY;
    } else {
      e.lse = std::max(e.lse, std::fabs(lse[n] - ref.lse[n]));
    }
  }
  return e;
}

// Runs decode() on the case and checks it against the oracle, within twice the plain three-pass error.
void ExpectMatchesOracle(VarlenCase& c, const VarlenMods& mods) {
  decode(c.params());
  const Result oracle = ThreePass<double>(c, mods);
  const Result plain = ThreePass<float>(c, mods);
  const std::int64_t total_q = c.params().total_query_rows(), Hq = c.shape().Hq, dv = c.params().value_head_dim();
  std::vector<double> O(total_q * Hq * dv), lse(total_q * Hq);
  for (std::int64_t row = 0; row < total_q; ++row)
    for (std::int64_t h = 0; h < Hq; ++h) {
      for (std::int64_t e = 0; e < dv; ++e) O[(row * Hq + h) * dv + e] = c.O(row, h, e);
      lse[h * total_q + row] = c.Lse(row, h);
    }
  const Errors kernel = ErrorsOf(O, lse, oracle);
  const Errors baseline = ErrorsOf(plain.O, plain.lse, oracle);
  EXPECT_LE(kernel.o, 2.0 * baseline.o + 1e-7) << c.shape().ToString() << " (plain three-pass: " << baseline.o << ")";
  EXPECT_LE(kernel.lse, std::max(1e-4, 2.0 * baseline.lse)) << c.shape().ToString();
  // A row that sees no key: O = 0 and LSE = −∞.
  for (std::int64_t row = 0; row < total_q; ++row)
    for (std::int64_t h = 0; h < Hq; ++h) {
      if (oracle.lse[h * total_q + row] != kNegInfOf<double>) continue;
      ASSERT_EQ(lse[h * total_q + row], kNegInfOf<double>);
      for (std::int64_t e = 0; e < dv; ++e) ASSERT_EQ(O[(row * Hq + h) * dv + e], 0.0);
    }
}

const VarlenShape kMixed{.rows = {0, 1, 5, 97, 513}, .keys = {0, 1, 18, 463, 1328}};

TEST(DecodeVarlen, MixedBatchOverEveryPageSizeAndContiguous) {
  for (std::int64_t page_size : {0, 1, 16, 256}) {
    VarlenShape shape = kMixed;
    shape.page_size = page_size;
    VarlenCase c(shape, {}, 1);
    ExpectMatchesOracle(c, {});
  }
}

TEST(DecodeVarlen, AppendsEachSequencesOwnRows) {
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    VarlenShape shape = kMixed;
    shape.page_size = 16, shape.append = true, shape.Hq = 8, shape.Hkv = 2, shape.d = 128;
    shape.dtype = shape.cache_dtype = dtype;
    VarlenCase c(shape, {}, 2);
    ExpectMatchesOracle(c, {});
  }
}

TEST(DecodeVarlen, TailHeadDimWindowSoftcapSinksAndSplits) {
  const VarlenMods mods{.window_left = 50, .softcap = 20.0f, .sinks = true, .num_splits = 3};
  for (const std::int64_t d : {59, 111}) {
    VarlenShape shape = kMixed;
    shape.page_size = 16, shape.Hq = 8, shape.Hkv = 2, shape.d = d;
    VarlenCase c(shape, mods, 3);
    ExpectMatchesOracle(c, mods);
  }
}

TEST(DecodeVarlen, HeadDim256EightQueryHeadsPerKvHeadPagesOf32) {
  VarlenShape shape{.rows = {0, 1, 5, 97, 130}, .keys = {0, 1, 18, 463, 1328}, .Hq = 8, .Hkv = 1, .d = 256};
  shape.page_size = 32, shape.append = true, shape.dtype = shape.cache_dtype = DType::kF16;
  VarlenCase c(shape, {.window_left = 300}, 14);
  ExpectMatchesOracle(c, {.window_left = 300});
}

TEST(DecodeVarlen, ValuesInsideTheKeys) {
  VarlenShape shape{.rows = {0, 1, 5, 97}, .keys = {0, 1, 18, 463}};
  shape.Hq = 4, shape.Hkv = 1, shape.d = 576, shape.dv = 512, shape.page_size = 16, shape.append = true;
  shape.dtype = shape.cache_dtype = DType::kBF16;
  VarlenCase c(shape, {}, 4);
  ExpectMatchesOracle(c, {});
}

TEST(DecodeVarlen, QuantizedCaches) {
  for (const CacheElement element : {CacheElement::kInt8, CacheElement::kFp8E4M3}) {
    for (const std::int64_t page_size : {0, 16}) {
      VarlenShape shape = kMixed;
      shape.Hq = 8, shape.Hkv = 2, shape.d = 128, shape.page_size = page_size, shape.element = element;
      shape.append = page_size > 0;
      const VarlenMods mods{.window_left = page_size > 0 ? -1 : 200};
      VarlenCase c(shape, mods, 5);
      ExpectMatchesOracle(c, mods);
    }
  }
}

// Sequences with many query rows run through the forward kernel over their keys gathered from the cache, the
// others through the decode kernel (src/decode_schedule.cc): both against the oracle, here with the modifiers
// that place the rows (ALiBi distances, rotary positions, keys held past the cache).
const VarlenShape kLongAndShortChunks{.rows = {0, 3, 70, 200, 1}, .keys = {2, 40, 300, 1025, 9}, .Hq = 8, .Hkv = 2,
                                      .d = 64};

TEST(DecodeVarlen, LongChunksWithAlibiRotaryAndKeysAfter) {
  const VarlenMods mods{.sinks = true, .alibi = true, .rotary = true, .keys_after = true};
  for (const std::int64_t page_size : {1, 16, 0}) {
    VarlenShape shape = kLongAndShortChunks;
    shape.page_size = page_size, shape.append = page_size != 1;
    VarlenCase c(shape, mods, 20 + page_size);
    ExpectMatchesOracle(c, mods);
  }
}

TEST(DecodeVarlen, LongChunksOverEveryCacheType) {
  struct Types {
    CacheElement element;
    DType cache_dtype, dtype;
  };
  const Types kTypes[] = {{CacheElement::kFloat, DType::kF32, DType::kF32},   {CacheElement::kFloat, DType::kBF16, DType::kBF16},
                          {CacheElement::kFloat, DType::kF16, DType::kF32},   {CacheElement::kFloat, DType::kF32, DType::kBF16},
                          {CacheElement::kFloat, DType::kBF16, DType::kF16},  {CacheElement::kInt8, DType::kF32, DType::kF32},
                          {CacheElement::kFp8E4M3, DType::kF32, DType::kBF16}, {CacheElement::kFp8E5M2, DType::kF32, DType::kF16}};
  int seed = 30;
  for (const Types& types : kTypes) {
    VarlenShape shape = kLongAndShortChunks;
    shape.page_size = 16, shape.append = true;
    shape.element = types.element, shape.cache_dtype = types.cache_dtype, shape.dtype = types.dtype;
    const VarlenMods mods{.causal = seed % 2 == 0, .window_left = 100, .softcap = 15.0f};
    VarlenCase c(shape, mods, ++seed);
    ExpectMatchesOracle(c, mods);
  }
}

// The schedule's promise: the same bits from run to run; across thread counts, the long chunks' rows (one
// thread per forward Q block) and, with a fixed num_splits, every row.
TEST(DecodeVarlen, BitsRepeatAndLongChunksKeepThemAcrossThreadCounts) {
  VarlenShape shape = kLongAndShortChunks;
  shape.page_size = 16, shape.dtype = shape.cache_dtype = DType::kBF16;
  const auto outputs = [&](int threads, std::int64_t num_splits) {
    VarlenCase c(shape, {.sinks = true, .num_splits = num_splits}, 40);
    c.params().num_threads = threads;
    decode(c.params());
    std::vector<float> o;
    for (std::int64_t row = 0; row < c.params().total_query_rows(); ++row)
      for (std::int64_t h = 0; h < shape.Hq; ++h) {
        o.push_back(c.Lse(row, h));
        for (std::int64_t e = 0; e < shape.d; ++e) o.push_back(c.O(row, h, e));
      }
    return o;
  };
  EXPECT_EQ(outputs(2, 0), outputs(2, 0));
  for (const int threads : {1, 3}) EXPECT_EQ(outputs(threads, 2), outputs(2, 2)) << threads << " threads";
  const std::int64_t long_rows_begin = (0 + 3) * shape.Hq * (1 + shape.d);  // sequences 2 and 3: 70 and 200 rows
  const std::int64_t long_rows_end = (0 + 3 + 70 + 200) * shape.Hq * (1 + shape.d);
  const std::vector<float> two = outputs(2, 0), one = outputs(1, 0);
  EXPECT_TRUE(std::equal(two.begin() + long_rows_begin, two.begin() + long_rows_end, one.begin() + long_rows_begin));
}

TEST(DecodeVarlen, LongCache) {
  VarlenShape shape{.rows = {1, 3, 0}, .keys = {8193, 10, 5}};
  shape.page_size = 16;
  VarlenCase c(shape, {}, 6);
  ExpectMatchesOracle(c, {});
}

// With every sequence holding seqlen_q rows the packed call is the batched one: the same bits.
TEST(DecodeVarlen, EqualCountsGiveTheBatchedCallsBits) {
  VarlenShape shape{.rows = {3, 3, 3}, .keys = {40, 3, 77}};
  shape.Hq = 4, shape.Hkv = 2, shape.page_size = 16, shape.append = true;
  VarlenCase packed(shape, {}, 7), batched(shape, {}, 7);
  DecodeParams& p = batched.params();
  p.cu_seqlens_q = nullptr;
  p.set_contiguous_strides();
  decode(packed.params());
  decode(p);
  EXPECT_EQ(packed.Bytes(false), batched.Bytes(false));
  for (std::int64_t b = 0; b < 3; ++b)
    for (std::int64_t h = 0; h < 4; ++h)
      for (std::int64_t i = 0; i < 3; ++i) EXPECT_EQ(packed.Lse(3 * b + i, h), batched.params().lse[(b * 4 + h) * 3 + i]);
}

// What the oracle above does not model — ALiBi, rotary, keys held elsewhere (keys_after), E5M2, the int8
// integer options — each packed sequence against the batched call of that sequence alone (batch 1, its own
// rows), which decode_test and decode_quantized_test hold to their oracles: the same values within float32's
// rounding (the row groups of the two calls may tile the rows differently).
struct Extras {
  bool alibi = false, rotary = false, keys_after = false;
  bool integer_scores = false, integer_pv = false;
};

void ExpectEachSequenceIsItsBatchedCall(const VarlenShape& shape, const Extras& extras, std::uint64_t seed) {
  VarlenCase c(shape, {.num_splits = 1}, seed);
  DecodeParams& p = c.params();
  const std::int64_t B = p.batch, Hq = shape.Hq, dv = p.value_head_dim();
  std::vector<float> slopes, cos_table, sin_table;
  std::vector<std::int32_t> after;
  for (std::int64_t h = 0; h < Hq; ++h) slopes.push_back(0.05f * static_cast<float>(h + 1));
  const std::int64_t positions = 4096, rotary_dim = shape.d / 2 * 2;
  for (std::int64_t pos = 0; pos < positions; ++pos)
    for (std::int64_t f = 0; f < rotary_dim / 2; ++f) {
      const double angle = static_cast<double>(pos) * std::pow(10000.0, -2.0 * f / rotary_dim);
      cos_table.push_back(static_cast<float>(std::cos(angle)));
      sin_table.push_back(static_cast<float>(std::sin(angle)));
    }
  for (std::int64_t b = 0; b < B; ++b) after.push_back(static_cast<std::int32_t>(3 * b + 2));
  if (extras.alibi) p.alibi_slopes = slopes.data();
  if (extras.rotary) {
    p.rotary_cos = cos_table.data(), p.rotary_sin = sin_table.data();
    p.rotary_dim = rotary_dim, p.rotary_max_pos = positions;
  }
  if (extras.keys_after) p.keys_after = after.data();
  p.quantize_query_int8 = extras.integer_scores, p.quantize_probs_u8 = extras.integer_pv;
  const DecodeParams packed = p;
  decode(packed);
  const auto& cu = c.cu();
  const std::int64_t q_bytes = size_of(shape.dtype);
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t rows = shape.rows[b];
    if (rows == 0) continue;
    DecodeParams one = packed;
    one.cu_seqlens_q = nullptr, one.batch = 1, one.seqlen_q = rows, one.seqlen_new = shape.append ? rows : 0;
    one.set_contiguous_strides();
    one.cache_seqlens = &c.cached()[b];
    one.block_table = c.table().data() + b * packed.block_table_stride;
    if (extras.keys_after) one.keys_after = &after[b];
    const auto at_row = [&](const void* base, const Strides& s) {
      return static_cast<const std::uint8_t*>(base) + cu[b] * s.seq * q_bytes;
    };
    one.q = at_row(packed.q, packed.q_strides);
    if (shape.append) {
      one.k_new = at_row(packed.k_new, packed.new_strides);
      if (packed.v_new != nullptr) one.v_new = at_row(packed.v_new, packed.new_strides);
    }
    std::vector<std::uint8_t> o(rows * Hq * dv * q_bytes);
    std::vector<float> lse(Hq * rows);
    one.o = o.data(), one.lse = lse.data();
    decode(one);  // appends the same rows at the same places again: the cache keeps its bytes
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t h = 0; h < Hq; ++h) {
        const float packed_lse = c.Lse(cu[b] + i, h), alone_lse = lse[h * rows + i];
        ASSERT_NEAR(packed_lse, alone_lse, 1e-5f * std::max(1.0f, std::fabs(alone_lse)))
            << shape.ToString() << " sequence " << b << " row " << i << " head " << h;
        for (std::int64_t e = 0; e < dv; ++e) {
          const float alone = LoadAsFloat(o.data(), shape.dtype, (i * Hq + h) * dv + e);
          ASSERT_NEAR(c.O(cu[b] + i, h, e), alone, 1e-5f * std::max(1.0f, std::fabs(alone)))
              << shape.ToString() << " sequence " << b << " row " << i << " head " << h << " feature " << e;
        }
      }
  }
}

const VarlenShape kSmallMixed{.rows = {0, 1, 5, 9, 40}, .keys = {3, 1, 18, 463, 300}, .Hq = 8, .Hkv = 2, .d = 128,
                              .page_size = 16};

TEST(DecodeVarlen, AlibiRotaryAndKeysAfterAsTheBatchedCall) {
  for (const bool append : {false, true}) {
    VarlenShape shape = kSmallMixed;
    shape.append = append;
    ExpectEachSequenceIsItsBatchedCall(shape, {.alibi = true, .rotary = true}, 8);
    ExpectEachSequenceIsItsBatchedCall(shape, {.keys_after = true}, 9);
  }
}

TEST(DecodeVarlen, E5M2AndTheIntegerOptionsAsTheBatchedCall) {
  VarlenShape shape = kSmallMixed;
  shape.element = CacheElement::kFp8E5M2, shape.append = true;
  ExpectEachSequenceIsItsBatchedCall(shape, {.alibi = true}, 10);
  shape.element = CacheElement::kInt8;
  ExpectEachSequenceIsItsBatchedCall(shape, {.integer_scores = true, .integer_pv = true}, 11);
  shape.d = 111;  // a tail; integer scores alone
  ExpectEachSequenceIsItsBatchedCall(shape, {.integer_scores = true}, 12);
}

TEST(DecodeVarlen, AppendsIntoAContiguousCache) {
  VarlenShape shape = kMixed;
  shape.append = true, shape.Hq = 4, shape.Hkv = 2;
  VarlenCase c(shape, {}, 13);
  ExpectMatchesOracle(c, {});
}

// ---- Hostile input: a clear error naming the argument, nothing written ----------------------------------

void ExpectRejected(VarlenCase& c, const std::string& expected) {
  const std::vector<std::uint8_t> before = c.Bytes();
  try {
    decode(c.params());
    ADD_FAILURE() << "no error, expected one with '" << expected << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
  EXPECT_EQ(c.Bytes(), before) << expected;
}

VarlenShape SmallPaged() {
  VarlenShape shape{.rows = {2, 0, 4}, .keys = {20, 7, 33}};
  shape.page_size = 16, shape.append = true;
  return shape;
}

TEST(DecodeVarlenValidation, BlockTableEntryOutsideThePool) {
  VarlenCase c(SmallPaged(), {}, 8);
  c.table()[2 * c.params().max_pages + 1] = static_cast<std::int32_t>(c.params().num_pages);
  ExpectRejected(c, "block_table[2][1]");
}

// Pages may be shared (a common prefix), but two sequences appending into one slot is refused.
TEST(DecodeVarlenValidation, TwoSequencesAppendingIntoOneSlot) {
  VarlenCase c(VarlenShape{.rows = {2, 2}, .keys = {5, 5}, .Hq = 2, .Hkv = 1, .d = 16, .page_size = 16,
                           .append = true},
               {}, 15);
  c.table()[1] = c.table()[0];  // one page per sequence: the same page, appended at slots 3 and 4 by both
  ExpectRejected(c, "two appended keys would be written to the same cache slot");
}

TEST(DecodeVarlenValidation, KeysBeyondTheTablesPages) {
  VarlenCase c(SmallPaged(), {}, 9);
  c.cached()[1] = static_cast<std::int32_t>(c.params().max_pages * c.params().page_size + 1);
  ExpectRejected(c, "cache_seqlens[1]");
}

TEST(DecodeVarlenValidation, DecreasingCuSeqlensQ) {
  VarlenCase c(SmallPaged(), {}, 10);
  c.cu()[2] = 1;  // {0, 2, 1, 6}
  ExpectRejected(c, "cu_seqlens_q must be non-decreasing, got cu_seqlens_q[1]=2 > cu_seqlens_q[2]=1");
}

TEST(DecodeVarlenValidation, CuSeqlensQFromZero) {
  VarlenCase c(SmallPaged(), {}, 11);
  c.cu()[0] = 1;
  ExpectRejected(c, "cu_seqlens_q[0] must be 0");
}

TEST(DecodeVarlenValidation, MoreRowsThanSeqlenQ) {
  VarlenCase c(SmallPaged(), {}, 12);
  c.params().seqlen_q = c.params().seqlen_new = 3;
  ExpectRejected(c, "sequence 2 has 4 query rows");
}

TEST(DecodeVarlenValidation, AppendOfAnotherCount) {
  VarlenCase c(SmallPaged(), {}, 13);
  c.params().seqlen_new = 1;
  ExpectRejected(c, "seqlen_new must be 0 or seqlen_q=4");
}

}  // namespace
}  // namespace flashattn::testing
