// Lightning-indexer problems that own their buffers: q, a contiguous or paged key cache of any element type
// with its scales, the weights, and the outputs, filled with a sentinel so that a test sees what a call wrote.
// With `integers`, q, k and w are small integers (k times a power-of-two scale), so every score is an exact
// float32 sum, the kernel's and the float64 reference's agree exactly, and ties are common.
#ifndef FLASHATTN_TESTS_INDEXER_TEST_CASE_H_
#define FLASHATTN_TESTS_INDEXER_TEST_CASE_H_

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/cache_element_traits.h"
#include "common/element.h"
#include "common/quantize.h"
#include "flashattn/indexer.h"

namespace flashattn::testing {

struct IndexerShape {
  std::vector<std::int32_t> keys = {10};  // cache_seqlens; its size is the batch
  std::int64_t Nq = 1, heads = 4, d = 40, top_k = 8;
  DType dtype = DType::kF32;
  CacheElement element = CacheElement::kFloat;
  DType cache_dtype = DType::kF32;
  std::int64_t page_size = 0;  // 0 = contiguous
  bool causal = true;
  bool integers = true;

  std::string ToString() const {
    std::ostringstream s;
    s << "keys=" << keys.size() << "x[" << keys.front() << "..] Nq=" << Nq << " H=" << heads << " d=" << d
      << " top_k=" << top_k << " q=" << to_string(dtype) << " k=" << to_string(element) << "/"
      << to_string(cache_dtype) << " page=" << page_size << " causal=" << causal << " integers=" << integers;
    return s.str();
  }
};

inline constexpr std::int32_t kUnwrittenIndex = -12345;

class IndexerCase {
 public:
  IndexerCase(const IndexerShape& shape, std::uint64_t seed) : shape_(shape), rng_(seed) {
    IndexerParams& p = params_;
    p.batch = static_cast<std::int64_t>(shape.keys.size());
    p.seqlen_q = shape.Nq;
    p.heads = shape.heads;
    p.head_dim = shape.d;
    p.dtype = shape.dtype;
    p.cache_dtype = shape.cache_dtype;
    p.cache_element = shape.element;
    p.top_k = shape.top_k;
    p.causal = shape.causal;
    const std::int64_t most = std::max<std::int64_t>(1, *std::max_element(shape.keys.begin(), shape.keys.end()));
    if (shape.page_size > 0) {
      p.page_size = shape.page_size;
      p.max_pages = (most + shape.page_size - 1) / shape.page_size + 1;  // a spare column
      p.num_pages = p.batch * p.max_pages + 3;
      p.block_table_stride = p.max_pages;
      std::vector<std::int32_t> pages(static_cast<std::size_t>(p.num_pages));
      std::iota(pages.begin(), pages.end(), 0);
      std::shuffle(pages.begin(), pages.end(), rng_);
      table_.assign(pages.begin(), pages.begin() + p.batch * p.max_pages);
    } else {
      p.cache_seqlen_max = most + 3;
    }
    seqlens_ = shape.keys;
    const std::int64_t rows = shape.page_size > 0 ? p.num_pages * p.page_size : p.batch * p.cache_seqlen_max;
    q_.resize(static_cast<std::size_t>(p.batch * p.seqlen_q * p.heads * p.head_dim * 4));
    for (std::int64_t i = 0; i < p.batch * p.seqlen_q * p.heads * p.head_dim; ++i) {
      StoreFromFloat(q_.data(), p.dtype, i, Value(2));
    }
    weights_.resize(static_cast<std::size_t>(p.batch * p.seqlen_q * p.heads));
    for (float& w : weights_) w = Value(3);
    k_.resize(static_cast<std::size_t>(rows * p.head_dim * 4));
    if (Quantized(p.cache_element)) {
      scales_.resize(static_cast<std::size_t>(rows));
      std::uniform_int_distribution<int> exponent(-2, 1);
      for (float& s : scales_) s = shape.integers ? std::ldexp(1.0f, exponent(rng_)) : 0.01f + 0.02f * Uniform();
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t e = 0; e < p.head_dim; ++e) {
          const float value = shape.integers ? Value(3) : 3.0f * Normal();
          k_[r * p.head_dim + e] = EncodeQuantized(value, 1.0f, p.cache_element);
        }
    } else {
      for (std::int64_t i = 0; i < rows * p.head_dim; ++i) StoreFromFloat(k_.data(), p.cache_dtype, i, Value(3));
    }
    indices_.assign(static_cast<std::size_t>(p.batch * p.seqlen_q * p.top_k), kUnwrittenIndex);
    scores_.assign(indices_.size(), 777.0f);
    Point();
  }
  IndexerCase(const IndexerCase&) = delete;
  IndexerCase& operator=(const IndexerCase&) = delete;

  IndexerParams& params() { return params_; }
  const IndexerShape& shape() const { return shape_; }
  std::vector<std::int32_t>& indices() { return indices_; }
  std::vector<float>& scores() { return scores_; }
  std::vector<float>& weights() { return weights_; }
  std::vector<std::int32_t>& seqlens() { return seqlens_; }
  std::vector<std::int32_t>& table() { return table_; }

  // Key s of sequence b, feature e: its storage element as a float (before any scale), and a setter.
  std::int64_t KeyOffset(std::int64_t b, std::int64_t s) const {
    const IndexerParams& p = params_;
    if (p.page_size == 0) return (b * p.cache_seqlen_max + s) * p.head_dim;
    return (table_[b * p.max_pages + s / p.page_size] * p.page_size + s % p.page_size) * p.head_dim;
  }
  void SetKey(std::int64_t b, std::int64_t s, std::int64_t e, float value) {
    StoreFromFloat(k_.data(), params_.cache_dtype, KeyOffset(b, s) + e, value);
  }
  void CopyKey(std::int64_t b, std::int64_t from, std::int64_t to) {
    const std::int64_t bytes =
        Quantized(params_.cache_element) ? 1 : static_cast<std::int64_t>(size_of(params_.cache_dtype));
    std::copy_n(k_.begin() + KeyOffset(b, from) * bytes, params_.head_dim * bytes,
                k_.begin() + KeyOffset(b, to) * bytes);
    if (!scales_.empty()) scales_[KeyOffset(b, to) / params_.head_dim] = scales_[KeyOffset(b, from) / params_.head_dim];
  }
  void SetQ(std::int64_t i, float value) { StoreFromFloat(q_.data(), params_.dtype, i, value); }

  // The same problem with outputs of its own (for the reference), written by `run`.
  template <class Run>
  std::pair<std::vector<std::int32_t>, std::vector<float>> RunInto(const Run& run) {
    std::vector<std::int32_t> indices(indices_.size(), kUnwrittenIndex);
    std::vector<float> scores(scores_.size(), 777.0f);
    IndexerParams p = params_;
    p.key_indices = indices.data();
    p.scores = scores.data();
    run(p);
    return {indices, scores};
  }

 private:
  void Point() {
    IndexerParams& p = params_;
    p.q = q_.data();
    p.k_cache = k_.data();
    p.k_scale = scales_.empty() ? nullptr : scales_.data();
    p.weights = weights_.data();
    p.key_indices = indices_.data();
    p.scores = scores_.data();
    p.cache_seqlens = seqlens_.data();
    p.block_table = table_.empty() ? nullptr : table_.data();
    p.set_contiguous_strides();
  }
  // An integer in [−m, m], or a normal value when the case is not of integers.
  float Value(int m) {
    if (!shape_.integers) return Normal();
    return static_cast<float>(std::uniform_int_distribution<int>(-m, m)(rng_));
  }
  float Normal() { return std::normal_distribution<float>()(rng_); }
  float Uniform() { return std::uniform_real_distribution<float>()(rng_); }

  IndexerShape shape_;
  std::mt19937_64 rng_;
  IndexerParams params_;
  std::vector<std::uint8_t> q_, k_;
  std::vector<float> scales_, weights_, scores_;
  std::vector<std::int32_t> indices_, seqlens_, table_;
};

}  // namespace flashattn::testing

#endif  // FLASHATTN_TESTS_INDEXER_TEST_CASE_H_
