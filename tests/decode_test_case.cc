#include "decode_test_case.h"

#include <algorithm>
#include <cmath>
#include <complex>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>

#include "common/element.h"

namespace flashattn::testing {

std::string DecodeShape::ToString() const {
  std::ostringstream s;
  s << "nq" << Nq << "_new" << Nnew << "_hq" << Hq << "_hkv" << Hkv << "_d" << d << "_" << flashattn::to_string(dtype)
    << (page_size > 0 ? "_page" + std::to_string(page_size) : std::string("_contiguous")) << "_cached";
  for (std::int32_t n : cached) s << "_" << n;
  return s.str();
}

std::string DecodeMods::ToString() const {
  std::ostringstream s;
  s << (causal ? "causal" : "full");
  if (window_left >= 0 || window_right >= 0) s << "_win" << window_left << "_" << window_right;
  if (softcap > 0) s << "_cap" << softcap;
  if (alibi) s << "_alibi";
  if (rotary_dim > 0) s << "_rotary" << rotary_dim << (interleaved ? "gptj" : "neox");
  return s.str();
}

namespace {
std::int64_t Slots(DType dtype) { return dtype == DType::kF32 ? 2 : 1; }
}  // namespace

DecodeCase::DecodeCase(const DecodeShape& shape, const DecodeMods& mods, std::uint64_t seed)
    : shape_(shape), mods_(mods) {
  DecodeParams& p = params_;
  const std::int64_t B = batch(), d = shape.d, slots = Slots(shape.dtype);
  p.batch = B;
  p.seqlen_q = shape.Nq;
  p.seqlen_new = shape.Nnew;
  p.heads_q = shape.Hq;
  p.heads_kv = shape.Hkv;
  p.head_dim = d;
  p.dtype = p.cache_dtype = shape.dtype;
  p.causal = mods.causal;
  p.window_left = mods.window_left;
  p.window_right = mods.window_right;
  p.softcap = mods.softcap;
  cache_seqlens_ = shape.cached;
  p.cache_seqlens = cache_seqlens_.data();

  std::mt19937_64 rng(seed), layout_rng(seed ^ 0x9e3779b97f4a7c15ull);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::int64_t cache_rows;  // rows of Hkv·d elements in each cache
  if (shape.page_size > 0) {
    p.page_size = shape.page_size;
    p.max_pages = (shape.Nmax + shape.page_size - 1) / shape.page_size;
    p.num_pages = B * p.max_pages + 3;  // three pages no sequence uses
    p.block_table_stride = p.max_pages + 1;
    std::vector<std::int32_t> pages(p.num_pages);
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), layout_rng);
    block_table_.assign(std::max<std::int64_t>(1, B * p.block_table_stride), -7);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t n = 0; n < p.max_pages; ++n) block_table_[b * p.block_table_stride + n] = pages[b * p.max_pages + n];
    p.block_table = block_table_.data();
    cache_rows = p.num_pages * p.page_size;
  } else {
    p.cache_seqlen_max = shape.Nmax;
    cache_rows = B * shape.Nmax;
  }
  p.set_contiguous_strides();

  q_.resize(std::max<std::int64_t>(1, B * shape.Nq * shape.Hq * d * slots));
  k_new_.resize(std::max<std::int64_t>(1, B * shape.Nnew * shape.Hkv * d * slots));
  v_new_.resize(k_new_.size());
  k_cache_.resize(std::max<std::int64_t>(1, cache_rows * shape.Hkv * d * slots));
  v_cache_.resize(k_cache_.size());
  o_.assign(std::max<std::int64_t>(1, B * shape.Nq * shape.Hq * d * slots), 0x7e00);  // NaN pattern
  lse_.assign(std::max<std::int64_t>(1, B * shape.Hq * shape.Nq), std::numeric_limits<float>::quiet_NaN());
  p.q = q_.data(), p.k_new = k_new_.data(), p.v_new = v_new_.data();
  p.k_cache = k_cache_.data(), p.v_cache = v_cache_.data(), p.o = o_.data(), p.lse = lse_.data();

  // Every cache element first gets layout-dependent filler, then the logical rows get seed-only values.
  std::uniform_real_distribution<float> filler(-100.0f, 100.0f);
  for (std::int64_t n = 0; n < cache_rows * shape.Hkv * d; ++n) {
    StoreFromFloat(k_cache_.data(), shape.dtype, n, filler(layout_rng));
    StoreFromFloat(v_cache_.data(), shape.dtype, n, filler(layout_rng));
  }
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t j = 0; j < shape.Nmax; ++j)
      for (std::int64_t hk = 0; hk < shape.Hkv; ++hk) {
        const std::int64_t row = CacheOffset(b, j, hk);
        for (std::int64_t e = 0; e < d; ++e) StoreFromFloat(k_cache_.data(), shape.dtype, row + e, normal(rng));
        for (std::int64_t e = 0; e < d; ++e) StoreFromFloat(v_cache_.data(), shape.dtype, row + e, normal(rng));
      }
  for (std::int64_t n = 0; n < B * shape.Nq * shape.Hq * d; ++n) StoreFromFloat(q_.data(), shape.dtype, n, normal(rng));
  for (std::int64_t n = 0; n < B * shape.Nnew * shape.Hkv * d; ++n) {
    StoreFromFloat(k_new_.data(), shape.dtype, n, normal(rng));
    StoreFromFloat(v_new_.data(), shape.dtype, n, normal(rng));
  }
  if (mods.alibi) {
    alibi_.resize(B * shape.Hq);
    for (std::size_t n = 0; n < alibi_.size(); ++n) alibi_[n] = std::exp2(-8.0f * (n % shape.Hq + 1) / shape.Hq) + 0.01f * (n / shape.Hq);
    p.alibi_slopes = alibi_.data();
    p.alibi_batch_stride = shape.Hq;
  }
  if (mods.rotary_dim > 0) {
    const std::int64_t half = mods.rotary_dim / 2;
    p.rotary_dim = mods.rotary_dim;
    p.rotary_max_pos = shape.Nmax;
    p.rotary_interleaved = mods.interleaved;
    cos_.resize(shape.Nmax * half);
    sin_.resize(shape.Nmax * half);
    for (std::int64_t pos = 0; pos < shape.Nmax; ++pos)
      for (std::int64_t c = 0; c < half; ++c) {  // θ = pos · 10000^{−2c/rotary_dim}
        const double theta = pos * std::pow(10000.0, -2.0 * c / mods.rotary_dim);
        cos_[pos * half + c] = static_cast<float>(std::cos(theta));
        sin_[pos * half + c] = static_cast<float>(std::sin(theta));
      }
    p.rotary_cos = cos_.data();
    p.rotary_sin = sin_.data();
  }
}

std::int64_t DecodeCase::CacheOffset(std::int64_t b, std::int64_t j, std::int64_t hk) const {
  const Strides& s = params_.cache_strides;
  if (shape_.page_size == 0) return b * s.batch + j * s.seq + hk * s.head;
  const std::int64_t page = block_table_[b * params_.block_table_stride + j / shape_.page_size];
  return page * s.batch + (j % shape_.page_size) * s.seq + hk * s.head;
}

namespace {
std::vector<float> Row(const void* base, DType dtype, std::int64_t offset, std::int64_t d) {
  std::vector<float> row(d);
  for (std::int64_t e = 0; e < d; ++e) row[e] = LoadAsFloat(base, dtype, offset + e);
  return row;
}
}  // namespace

std::vector<float> DecodeCase::KRow(std::int64_t b, std::int64_t j, std::int64_t hk) const {
  return Row(k_cache_.data(), shape_.dtype, CacheOffset(b, j, hk), shape_.d);
}
std::vector<float> DecodeCase::VRow(std::int64_t b, std::int64_t j, std::int64_t hk) const {
  return Row(v_cache_.data(), shape_.dtype, CacheOffset(b, j, hk), shape_.d);
}
std::vector<float> DecodeCase::QRow(std::int64_t b, std::int64_t i, std::int64_t h) const {
  return Row(q_.data(), shape_.dtype, ((b * shape_.Nq + i) * shape_.Hq + h) * shape_.d, shape_.d);
}
std::vector<float> DecodeCase::KNewRow(std::int64_t b, std::int64_t i, std::int64_t hk) const {
  return Row(k_new_.data(), shape_.dtype, ((b * shape_.Nnew + i) * shape_.Hkv + hk) * shape_.d, shape_.d);
}
std::vector<float> DecodeCase::VNewRow(std::int64_t b, std::int64_t i, std::int64_t hk) const {
  return Row(v_new_.data(), shape_.dtype, ((b * shape_.Nnew + i) * shape_.Hkv + hk) * shape_.d, shape_.d);
}
float DecodeCase::O(std::int64_t b, std::int64_t i, std::int64_t h, std::int64_t e) const {
  return LoadAsFloat(o_.data(), shape_.dtype, ((b * shape_.Nq + i) * shape_.Hq + h) * shape_.d + e);
}

std::vector<std::uint16_t> DecodeCase::CacheSnapshot() const {
  std::vector<std::uint16_t> both = k_cache_;
  both.insert(both.end(), v_cache_.begin(), v_cache_.end());
  return both;
}

std::vector<float> PlainRotary(std::vector<float> x, std::int64_t rotary_dim, const float* cos, const float* sin,
                               bool interleaved) {
  const std::int64_t half = rotary_dim / 2;
  for (std::int64_t c = 0; c < half; ++c) {
    const std::int64_t re = interleaved ? 2 * c : c, im = interleaved ? 2 * c + 1 : c + half;
    const std::complex<double> z(x[re], x[im]), turn(cos[c], sin[c]);
    const std::complex<double> rotated = z * turn;
    x[re] = static_cast<float>(rotated.real());
    x[im] = static_cast<float>(rotated.imag());
  }
  return x;
}

ForwardResult ForwardOverCache(const DecodeCase& c, std::int64_t b, std::optional<Algorithm> algorithm) {
  const DecodeShape& s = c.shape();
  const DecodeParams& dp = c.params();
  const std::int64_t Nk = s.cached[b] + s.Nnew, d = s.d, slots = Slots(s.dtype);
  std::vector<std::uint16_t> q(std::max<std::int64_t>(1, s.Nq * s.Hq * d * slots));
  std::vector<std::uint16_t> k(std::max<std::int64_t>(1, Nk * s.Hkv * d * slots)), v(k.size());
  std::vector<std::uint16_t> o(std::max<std::int64_t>(1, s.Nq * s.Hq * d * slots));
  for (std::int64_t i = 0; i < s.Nq; ++i)
    for (std::int64_t h = 0; h < s.Hq; ++h) {
      std::vector<float> row = c.QRow(b, i, h);
      const std::int64_t pos = s.cached[b] + (dp.rotary_queries_at_cache_end ? 0 : i);
      if (c.mods().rotary_dim > 0) {
        row = PlainRotary(row, c.mods().rotary_dim, c.RotaryCos(pos), c.RotarySin(pos), c.mods().interleaved);
      }
      for (std::int64_t e = 0; e < d; ++e) StoreFromFloat(q.data(), s.dtype, (i * s.Hq + h) * d + e, row[e]);
    }
  for (std::int64_t j = 0; j < Nk; ++j)
    for (std::int64_t hk = 0; hk < s.Hkv; ++hk) {
      const std::vector<float> k_row = c.KRow(b, j, hk), v_row = c.VRow(b, j, hk);
      for (std::int64_t e = 0; e < d; ++e) {
        StoreFromFloat(k.data(), s.dtype, (j * s.Hkv + hk) * d + e, k_row[e]);
        StoreFromFloat(v.data(), s.dtype, (j * s.Hkv + hk) * d + e, v_row[e]);
      }
    }
  ForwardResult result{std::vector<float>(s.Nq * s.Hq * d), std::vector<float>(std::max<std::int64_t>(1, s.Hq * s.Nq))};
  AttentionParams p;
  p.q = q.data(), p.k = k.data(), p.v = v.data(), p.o = o.data(), p.lse = result.lse.data();
  p.batch = 1, p.seqlen_q = s.Nq, p.seqlen_k = Nk, p.heads_q = s.Hq, p.heads_kv = s.Hkv, p.head_dim = d;
  p.dtype = s.dtype;
  p.causal = dp.causal, p.window_left = dp.window_left, p.window_right = dp.window_right, p.softcap = dp.softcap;
  if (dp.alibi_slopes != nullptr) p.alibi_slopes = dp.alibi_slopes + b * dp.alibi_batch_stride;
  p.sinks = dp.sinks;
  p.set_contiguous_strides();
  if (algorithm) forward(p, *algorithm); else forward(p);
  for (std::int64_t n = 0; n < s.Nq * s.Hq * d; ++n) result.O[n] = LoadAsFloat(o.data(), s.dtype, n);
  return result;
}

Errors CompareWithForward(const DecodeCase& c, std::optional<Algorithm> algorithm) {
  const DecodeShape& s = c.shape();
  ErrorsAccumulator errors;
  for (std::int64_t b = 0; b < c.batch(); ++b) {
    const ForwardResult ref = ForwardOverCache(c, b, algorithm);
    for (std::int64_t i = 0; i < s.Nq; ++i)
      for (std::int64_t h = 0; h < s.Hq; ++h) {
        for (std::int64_t e = 0; e < s.d; ++e) errors.AddO(c.O(b, i, h, e), ref.O[(i * s.Hq + h) * s.d + e]);
        errors.AddLse(c.Lse(b, h, i), ref.lse[h * s.Nq + i]);
      }
  }
  return errors.Result();
}

}  // namespace flashattn::testing
