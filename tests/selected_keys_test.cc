// Attention over selected keys (key_indices): forward and decode on every compiled SIMD target against a
// float64 oracle over exactly the listed keys (the dense softmax of the row restricted to them, with softcap and
// sinks), decode over every cache element type (quantized ones against the dequantized cache after the call),
// contiguous and paged, packed queries, appends in the same call, MLA shapes with V inside K, softcap, sinks and
// ALiBi (its distances those of the listed positions); random lists
// (unsorted, −1 holes, rows of only −1, lists longer than the keys a row sees); and the hostile lists and refused
// combinations, with nothing written.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/element.h"
#include "common/quantize.h"
#include "decode/decode.h"
#include "flashattn/flashattn.h"
#include "simd/targets.h"
#include "test_problem.h"
#include "test_targets.h"

namespace flashattn::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

template <class Body>
void OnTargets(const std::vector<std::int64_t>& targets, Body&& body) {
  for (std::int64_t target : targets) {
    simd::RestrictTargetForTest(target);
    SCOPED_TRACE(simd::TargetName(target));
    body();
  }
  simd::RestrictTargetForTest(0);
}

// A list of k slots for a row that sees positions [lo, hi): some distinct ones of them (none when `empty`) in
// random slots, the rest −1.
std::vector<std::int32_t> RandomList(std::mt19937_64& rng, std::int64_t lo, std::int64_t hi, std::int64_t k,
                                     bool empty) {
  std::vector<std::int32_t> list(static_cast<std::size_t>(k), -1);
  const std::int64_t n = std::max<std::int64_t>(0, hi - lo);
  if (empty || n == 0) return list;
  const std::int64_t most = std::min(k, n);
  const std::int64_t m = std::uniform_int_distribution<std::int64_t>(std::max<std::int64_t>(1, most / 2), most)(rng);
  std::vector<std::int32_t> pool(static_cast<std::size_t>(n));
  std::iota(pool.begin(), pool.end(), static_cast<std::int32_t>(lo));
  for (std::int64_t c = 0; c < m; ++c) {
    std::swap(pool[c], pool[std::uniform_int_distribution<std::int64_t>(c, n - 1)(rng)]);
    list[c] = pool[c];
  }
  std::shuffle(list.begin(), list.end(), rng);
  return list;
}

// The keys row i on `diagonal` sees, clipped to [0, Nk).
std::pair<std::int64_t, std::int64_t> Visible(std::int64_t diagonal, std::int64_t Nk, bool causal,
                                              std::int64_t left) {
  const std::int64_t lo = left < 0 ? 0 : std::max<std::int64_t>(0, diagonal - left);
  const std::int64_t hi = causal ? std::min(Nk, diagonal + 1) : Nk;
  return {lo, hi};
}

// The float64 softmax of one query row over its listed keys (rows of K and V as floats), with scale, softcap and
// a sink; LSE −∞ (or the sink) and O = 0 without keys.
struct RowResult {
  std::vector<double> o;
  double lse;
};
// ALiBi: each key's distance from the row's diagonal, times `slope`, off its score.
struct RowAlibi {
  double slope = 0;
  std::int64_t diagonal = 0;
  std::vector<std::int64_t> positions;  // of the keys K holds
};
RowResult OracleRow(const std::vector<float>& q, const std::vector<std::vector<float>>& K,
                    const std::vector<std::vector<float>>& V, std::int64_t dv, double scale, double softcap,
                    double sink, const RowAlibi& alibi = {}) {
  std::vector<double> s;
  double m = sink;
  for (std::size_t c = 0; c < K.size(); ++c) {
    double dot = 0;
    for (std::size_t e = 0; e < q.size(); ++e) dot += static_cast<double>(q[e]) * K[c][e];
    double x = scale * dot;
    if (softcap > 0) x = softcap * std::tanh(x / softcap);
    if (alibi.slope != 0) x -= alibi.slope * static_cast<double>(std::llabs(alibi.diagonal - alibi.positions[c]));
    s.push_back(x), m = std::max(m, x);
  }
  RowResult r{std::vector<double>(static_cast<std::size_t>(dv), 0.0), -kInf};
  if (m == -kInf) return r;
  double l = sink == -kInf ? 0.0 : std::exp(sink - m);
  for (std::size_t c = 0; c < K.size(); ++c) {
    const double p = std::exp(s[c] - m);
    l += p;
    for (std::int64_t e = 0; e < dv; ++e) r.o[e] += p * V[c][e];
  }
  for (double& x : r.o) x /= l;
  r.lse = m + std::log(l);
  return r;
}

void ExpectRow(const RowResult& want, const void* o, DType dtype, std::int64_t o_at, const float* lse,
               std::int64_t lse_at, double tolerance, const std::string& where) {
  double worst = 0;
  for (std::size_t e = 0; e < want.o.size(); ++e) {
    const double got = LoadAsFloat(o, dtype, o_at + static_cast<std::int64_t>(e));
    worst = std::max(worst, std::isnan(got) ? kInf : std::abs(got - want.o[e]));
  }
  EXPECT_LE(worst, tolerance) << where;
  if (lse == nullptr) return;
  if (want.lse == -kInf) {
    EXPECT_EQ(lse[lse_at], -std::numeric_limits<float>::infinity()) << where;
  } else {
    EXPECT_NEAR(lse[lse_at], want.lse, 1e-4 * std::max(1.0, std::abs(want.lse))) << where;
  }
}

std::vector<float> Slopes(std::int64_t heads) {
  std::vector<float> slopes;
  for (std::int64_t h = 0; h < heads; ++h) slopes.push_back(0.5f / static_cast<float>(h + 1));
  return slopes;
}

double Tolerance(DType dtype) { return dtype == DType::kF32 ? 2e-5 : dtype == DType::kF16 ? 2e-3 : 1.6e-2; }

std::vector<float> Sinks(std::int64_t heads) {
  std::vector<float> sinks;
  for (std::int64_t h = 0; h < heads; ++h) sinks.push_back(h % 3 == 2 ? -INFINITY : 0.5f * (h % 3) - 0.25f);
  return sinks;
}

// ---- forward ------------------------------------------------------------------------------------------------

struct ForwardCase {
  Shape shape;
  std::int64_t k = 8;
  bool causal = false;
  std::int64_t window_left = -1;
  float softcap = 0.0f;
  bool sinks = false;
  bool values_in_keys = false;  // v = k with k's strides (MLA): V is the first dv features of each K row
  bool alibi = false;
  std::string ToString() const {
    return shape.ToString() + " k=" + std::to_string(k) + (causal ? " causal" : "") + (alibi ? " alibi" : "") +
           " window_left=" + std::to_string(window_left) + " softcap=" + std::to_string(softcap) +
           (sinks ? " sinks" : "") + (values_in_keys ? " V in K" : "");
  }
};

// Lists for every (b, i, hk) of a forward call; every fifth row has none.
std::vector<std::int32_t> ForwardLists(const ForwardCase& c, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const Shape& s = c.shape;
  std::vector<std::int32_t> lists;
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t i = 0; i < s.Nq; ++i)
      for (std::int64_t hk = 0; hk < s.Hkv; ++hk) {
        const auto [lo, hi] = Visible(i + s.Nk - s.Nq, s.Nk, c.causal, c.window_left);
        const std::vector<std::int32_t> list = RandomList(rng, lo, hi, c.k, (i + hk) % 5 == 3);
        lists.insert(lists.end(), list.begin(), list.end());
      }
  return lists;
}

void ExpectForwardMatchesOracle(const Problem& problem, const std::vector<std::int32_t>& lists,
                                const ForwardCase& c) {
  const AttentionParams& p = problem.params();
  const Shape& s = c.shape;
  const std::int64_t G = s.Hq / s.Hkv, dv = p.value_head_dim();
  const auto row = [&](const void* base, const Strides& st, std::int64_t b, std::int64_t j, std::int64_t h,
                       std::int64_t width) {
    std::vector<float> x(static_cast<std::size_t>(width));
    const std::int64_t at = b * st.batch + j * st.seq + h * st.head;
    for (std::int64_t e = 0; e < width; ++e) x[e] = LoadAsFloat(base, p.dtype, at + e);
    return x;
  };
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.d));
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t i = 0; i < s.Nq; ++i)
      for (std::int64_t h = 0; h < s.Hq; ++h) {
        const std::int32_t* list = &lists[((b * s.Nq + i) * s.Hkv + h / G) * c.k];
        std::vector<std::vector<float>> K, V;
        RowAlibi alibi{p.alibi_slopes == nullptr ? 0.0 : p.alibi_slopes[h], i + s.Nk - s.Nq, {}};
        for (std::int64_t slot = 0; slot < c.k; ++slot) {
          if (list[slot] < 0) continue;
          K.push_back(row(p.k, p.k_strides, b, list[slot], h / G, s.d));
          V.push_back(row(p.v, p.v_strides, b, list[slot], h / G, dv));
          alibi.positions.push_back(list[slot]);
        }
        const RowResult want = OracleRow(row(p.q, p.q_strides, b, i, h, s.d), K, V, dv, scale, c.softcap,
                                         p.sinks == nullptr ? -kInf : p.sinks[h], alibi);
        const std::int64_t o_at = b * p.o_strides.batch + i * p.o_strides.seq + h * p.o_strides.head;
        ExpectRow(want, p.o, p.dtype, o_at, p.lse, (b * s.Hq + h) * s.Nq + i, Tolerance(p.dtype),
                  c.ToString() + " b=" + std::to_string(b) + " i=" + std::to_string(i) + " h=" + std::to_string(h));
        if (::testing::Test::HasFailure()) return;
      }
}

std::vector<ForwardCase> ForwardCases() {
  return {
      {.shape = {.Nq = 97, .Nk = 113, .Hq = 4, .Hkv = 2, .d = 64, .dv = 64}, .k = 64, .causal = true, .alibi = true},
      {.shape = {.Nq = 113, .Nk = 97, .Hq = 2, .Hkv = 1, .d = 128, .dv = 128}, .k = 2048, .window_left = 40,
       .softcap = 5.0f},
      {.shape = {.Nq = 1, .Nk = 1025, .Hq = 16, .Hkv = 1, .d = 576, .dv = 512, .dtype = DType::kBF16}, .k = 64,
       .sinks = true},
      {.shape = {.Nq = 7, .Nk = 1025, .Hq = 8, .Hkv = 1, .d = 576, .dv = 512}, .k = 2048, .causal = true,
       .sinks = true, .values_in_keys = true},
      {.shape = {.batch = 2, .Nq = 97, .Nk = 97, .Hq = 3, .Hkv = 3, .d = 40, .dv = 59, .head_major = true},
       .k = 1, .causal = true},
      {.shape = {.batch = 2, .Nq = 33, .Nk = 111, .Hq = 4, .Hkv = 1, .d = 111, .dv = 111, .dtype = DType::kF16},
       .k = 17, .softcap = 3.0f, .sinks = true, .alibi = true},
  };
}

TEST(SelectedKeys, ForwardMatchesTheOracleOnEveryTarget) {
  std::uint64_t seed = 11;
  for (const ForwardCase& c : ForwardCases()) {
    Problem problem(c.shape, {.causal = c.causal, .window_left = c.window_left, .softcap = c.softcap}, ++seed);
    AttentionParams& p = problem.params();
    const std::vector<std::int32_t> lists = ForwardLists(c, seed);
    const std::vector<float> sinks = Sinks(c.shape.Hq), slopes = Slopes(c.shape.Hq);
    p.key_indices = {lists.data(), c.k};
    if (c.sinks) p.sinks = sinks.data();
    if (c.alibi) p.alibi_slopes = slopes.data();
    if (c.values_in_keys) p.v = p.k, p.v_strides = p.k_strides;
    OnTargets(TargetsUnderTest(), [&] {
      problem.ResetOutputs();
      forward(p);
      ExpectForwardMatchesOracle(problem, lists, c);
    });
    problem.ResetOutputs();
    forward(p, Algorithm::kOracle);  // the reference algorithms take the same keys as a mask
    ExpectForwardMatchesOracle(problem, lists, c);
  }
}

// ---- decode -------------------------------------------------------------------------------------------------

struct DecodeCaseSpec {
  std::vector<std::int32_t> cached = {100};
  std::int64_t Nq = 1;                 // per sequence; packed: query rows of sequence b are Nq + b mod 3 − 1
  std::int64_t Nnew = 0;               // appended in the call (packed: each sequence's own rows)
  std::int64_t Hq = 4, Hkv = 1, d = 64, dv = 64, k = 64;
  DType dtype = DType::kF32;
  CacheElement element = CacheElement::kFloat;
  DType cache_dtype = DType::kF32;
  std::int64_t group_size = 0;
  std::int64_t page_size = 0;
  bool packed = false;
  bool values_in_keys = false;
  bool causal = true;
  std::int64_t window_left = -1;
  float softcap = 0.0f;
  bool sinks = false;
  bool alibi = false;
  std::string ToString() const {
    std::string cached_text;
    for (std::int32_t n : cached) cached_text += std::to_string(n) + ",";
    return "cached={" + cached_text + "} Nq=" + std::to_string(Nq) + " Nnew=" + std::to_string(Nnew) +
           " Hq=" + std::to_string(Hq) + " Hkv=" + std::to_string(Hkv) + " d=" + std::to_string(d) +
           " dv=" + std::to_string(dv) + " k=" + std::to_string(k) + " dtype=" + std::string(to_string(dtype)) +
           " cache=" + std::string(to_string(element)) + "/" + std::string(to_string(cache_dtype)) +
           " g=" + std::to_string(group_size) + " page_size=" + std::to_string(page_size) + (packed ? " packed" : "") +
           (values_in_keys ? " V in K" : "") + (causal ? " causal" : "") + " window_left=" +
           std::to_string(window_left) + " softcap=" + std::to_string(softcap) + (sinks ? " sinks" : "") +
           (alibi ? " alibi" : "");
  }
};

// A decode call over a cache filled beforehand (an append of every sequence's keys by a decode call without
// query rows, so that every element type is written as decode writes it), its own buffers, and the oracle.
class SelectedDecode {
 public:
  SelectedDecode(const DecodeCaseSpec& c, std::uint64_t seed) : c_(c), rng_(seed) {
    const std::int64_t batch = static_cast<std::int64_t>(c.cached.size());
    const std::int64_t max_cached = *std::max_element(c.cached.begin(), c.cached.end());
    DecodeParams& p = p_;
    p.heads_q = c.Hq, p.heads_kv = c.Hkv, p.head_dim = c.d, p.head_dim_v = c.dv, p.dtype = c.dtype;
    p.causal = c.causal, p.window_left = c.window_left, p.softcap = c.softcap;
    p.batch = batch, p.cache_element = c.element, p.cache_dtype = c.cache_dtype, p.scale_group_size = c.group_size;
    // Query rows and appended rows per sequence.
    for (std::int64_t b = 0; b < batch; ++b) {
      rows_.push_back(c.packed ? std::max<std::int64_t>(0, c.Nq + b % 3 - 1) : c.Nq);
    }
    const std::int64_t max_rows = *std::max_element(rows_.begin(), rows_.end());
    const std::int64_t capacity = max_cached + std::max(c.Nnew, max_rows) + 3;
    if (c.page_size > 0) {
      p.page_size = c.page_size, p.max_pages = (capacity + c.page_size - 1) / c.page_size;
      p.num_pages = batch * p.max_pages + 2, p.block_table_stride = p.max_pages;
      std::vector<std::int32_t> pages(static_cast<std::size_t>(p.num_pages));
      std::iota(pages.begin(), pages.end(), 0);
      std::shuffle(pages.begin(), pages.end(), rng_);
      block_table_.assign(pages.begin(), pages.begin() + batch * p.max_pages);
      p.block_table = block_table_.data();
    } else {
      p.cache_seqlen_max = capacity;
    }
    p.seqlen_q = c.packed ? max_rows : c.Nq;
    if (c.packed) {
      cu_.push_back(0);
      for (std::int64_t n : rows_) cu_.push_back(cu_.back() + static_cast<std::int32_t>(n));
      p.cu_seqlens_q = cu_.data();
    }
    p.seqlen_new = c.packed ? (c.Nnew > 0 ? p.seqlen_q : 0) : c.Nnew;
    p.set_contiguous_strides();
    const std::int64_t outer = c.page_size > 0 ? p.num_pages : batch, seq = c.page_size > 0 ? c.page_size : capacity;
    const std::int64_t bytes = CacheElementBytes(p);
    k_cache_.assign(static_cast<std::size_t>(outer * seq * c.Hkv * c.d * bytes), std::byte{0x11});
    // V's rows take the cache strides, of d elements (set_contiguous_strides), as v_new's take new_strides.
    v_cache_.assign(static_cast<std::size_t>(outer * seq * c.Hkv * c.d * bytes), std::byte{0x22});
    p.k_cache = k_cache_.data(), p.v_cache = c.values_in_keys ? k_cache_.data() : v_cache_.data();
    if (c.element != CacheElement::kFloat) {
      const std::int64_t groups = c.d / (c.group_size == 0 ? c.d : c.group_size);
      k_scale_.assign(static_cast<std::size_t>(outer * seq * c.Hkv * groups), 1.0f);
      v_scale_ = k_scale_;
      p.k_scale = k_scale_.data(), p.v_scale = c.values_in_keys ? nullptr : v_scale_.data();
      if (c.values_in_keys) p.v_scale = p.k_scale;
    }
    Fill(max_cached);
    // The call's own tensors.
    const std::int64_t total = c.packed ? cu_.back() : batch * c.Nq;
    const std::int64_t new_total = c.packed ? (p.seqlen_new > 0 ? total : 0) : batch * c.Nnew;
    q_ = Random(total * c.Hq * c.d, c.dtype);
    k_new_ = Random(new_total * c.Hkv * c.d, c.dtype);
    v_new_ = Random(new_total * c.Hkv * c.d, c.dtype);
    o_.assign(static_cast<std::size_t>(total * c.Hq * c.dv * size_of(c.dtype)), std::byte{0x7f});
    lse_.assign(static_cast<std::size_t>(total * c.Hq), 12345.0f);
    p.q = q_.data(), p.o = o_.data(), p.lse = lse_.data();
    if (p.seqlen_new > 0) {
      p.k_new = k_new_.data(), p.v_new = c.values_in_keys ? nullptr : v_new_.data();
    }
    p.cache_seqlens = c.cached.data();
    sinks_ = Sinks(c.Hq), slopes_ = Slopes(c.Hq);
    if (c.sinks) p.sinks = sinks_.data();
    if (c.alibi) p.alibi_slopes = slopes_.data();
    // Lists over each row's visible keys of the cache after the append.
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int64_t Nk = c.cached[b] + p.new_rows(b);
      for (std::int64_t i = 0; i < rows_[b]; ++i)
        for (std::int64_t hk = 0; hk < c.Hkv; ++hk) {
          const auto [lo, hi] = Visible(Nk - rows_[b] + i, Nk, c.causal, c.window_left);
          const std::vector<std::int32_t> list = RandomList(rng_, lo, hi, c.k, (i + hk + b) % 7 == 5);
          lists_.insert(lists_.end(), list.begin(), list.end());
        }
    }
    p.key_indices = {lists_.data(), c.k};
  }

  DecodeParams& params() { return p_; }
  const std::vector<std::byte>& Output() const { return o_; }
  std::vector<std::int32_t>& lists() { return lists_; }
  std::vector<std::byte> Snapshot() const {
    std::vector<std::byte> all(o_);
    all.insert(all.end(), k_cache_.begin(), k_cache_.end());
    all.insert(all.end(), v_cache_.begin(), v_cache_.end());
    const auto* lse = reinterpret_cast<const std::byte*>(lse_.data());
    all.insert(all.end(), lse, lse + lse_.size() * sizeof(float));
    return all;
  }

  // Each row against the oracle over the cache as the call left it (dequantized).
  void ExpectMatchesOracle() const {
    const DecodeParams& p = p_;
    const std::int64_t G = c_.Hq / c_.Hkv;
    const Strides scale_strides = ScaleStridesOf(p);
    const double scale = 1.0 / std::sqrt(static_cast<double>(c_.d));
    const auto cache_row = [&](const void* cache, const float* scales, std::int64_t b, std::int64_t j,
                               std::int64_t hk, std::int64_t width) {
      std::vector<float> x(static_cast<std::size_t>(width));
      const float* row_scales = scales == nullptr ? nullptr : scales + CacheRowOffset(p, scale_strides, b, j, hk);
      LoadCacheRow(p, cache, row_scales, CacheRowOffset(p, p.cache_strides, b, j, hk), x.data(), width);
      return x;
    };
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t i = 0; i < rows_[b]; ++i) {
        const std::int64_t row = c_.packed ? cu_[b] + i : b * c_.Nq + i;
        for (std::int64_t h = 0; h < c_.Hq; ++h) {
          const std::int32_t* list = &lists_[(row * c_.Hkv + h / G) * c_.k];
          std::vector<std::vector<float>> K, V;
          const std::int64_t Nk = c_.cached[b] + p.new_rows(b);
          RowAlibi alibi{c_.alibi ? slopes_[h] : 0.0, Nk - rows_[b] + i, {}};
          for (std::int64_t slot = 0; slot < c_.k; ++slot) {
            if (list[slot] < 0) continue;
            K.push_back(cache_row(p.k_cache, p.k_scale, b, list[slot], h / G, c_.d));
            V.push_back(cache_row(p.v_cache, p.value_scales(), b, list[slot], h / G, c_.dv));
            alibi.positions.push_back(list[slot]);
          }
          std::vector<float> q(static_cast<std::size_t>(c_.d));
          const std::int64_t q_at = p.row_offset(p.q_strides, b, i, h);
          for (std::int64_t e = 0; e < c_.d; ++e) q[e] = LoadAsFloat(p.q, p.dtype, q_at + e);
          const RowResult want = OracleRow(q, K, V, c_.dv, scale, c_.softcap, c_.sinks ? sinks_[h] : -kInf, alibi);
          ExpectRow(want, p.o, p.dtype, p.row_offset(p.o_strides, b, i, h), p.lse, p.lse_index(b, h, i),
                    Tolerance(p.dtype),
                    c_.ToString() + " b=" + std::to_string(b) + " i=" + std::to_string(i) + " h=" + std::to_string(h));
          if (::testing::Test::HasFailure()) return;
        }
      }
  }

 private:
  std::vector<std::byte> Random(std::int64_t n, DType dtype) {
    std::vector<std::byte> x(static_cast<std::size_t>(n * size_of(dtype)));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (std::int64_t e = 0; e < n; ++e) StoreFromFloat(x.data(), dtype, e, u(rng_));
    return x;
  }
  // Writes `n` keys into every sequence's cache (then the call's cache_seqlens say how many count).
  void Fill(std::int64_t n) {
    DecodeParams fill = p_;
    fill.cu_seqlens_q = nullptr, fill.seqlen_q = 0, fill.seqlen_new = n, fill.q = nullptr, fill.o = nullptr;
    fill.lse = nullptr, fill.key_indices = {};
    fill.set_contiguous_strides();
    const std::vector<std::int32_t> empty(static_cast<std::size_t>(p_.batch), 0);
    fill.cache_seqlens = empty.data();
    const std::vector<std::byte> k = Random(p_.batch * n * c_.Hkv * c_.d, c_.dtype);
    const std::vector<std::byte> v = Random(p_.batch * n * c_.Hkv * c_.d, c_.dtype);
    fill.k_new = k.data(), fill.v_new = c_.values_in_keys ? nullptr : v.data();
    decode(fill);
    p_.scale_strides = fill.scale_strides;
  }

  DecodeCaseSpec c_;
  std::mt19937_64 rng_;
  DecodeParams p_;
  std::vector<std::int64_t> rows_;
  std::vector<std::int32_t> cu_, block_table_, lists_;
  std::vector<std::byte> k_cache_, v_cache_, q_, k_new_, v_new_, o_;
  std::vector<float> k_scale_, v_scale_, lse_, sinks_, slopes_;
};

// Runs the case on every target (the cache filled again for each, the append included) against the oracle.
void ExpectDecodeMatchesOracle(const DecodeCaseSpec& c, std::uint64_t seed,
                               const std::vector<std::int64_t>& targets) {
  OnTargets(targets, [&] {
    SelectedDecode call(c, seed);
    decode(call.params());
    call.ExpectMatchesOracle();
  });
}

TEST(SelectedKeys, DecodeFloatCachesMatchTheOracleOnEveryTarget) {
  const std::vector<DecodeCaseSpec> cases = {
      {.cached = {1}, .Nq = 1, .Hq = 4, .Hkv = 1, .d = 64, .dv = 64, .k = 1},
      {.cached = {97, 3}, .Nq = 2, .Nnew = 2, .Hq = 8, .Hkv = 2, .d = 128, .dv = 128, .k = 64, .softcap = 4.0f,
       .sinks = true, .alibi = true},
      {.cached = {1025}, .Nq = 1, .Hq = 16, .Hkv = 1, .d = 576, .dv = 512, .k = 2048, .dtype = DType::kBF16,
       .cache_dtype = DType::kBF16, .page_size = 16, .values_in_keys = true, .sinks = true},
      {.cached = {1025, 97}, .Nq = 3, .Nnew = 0, .Hq = 4, .Hkv = 2, .d = 59, .dv = 40, .k = 2048,
       .cache_dtype = DType::kF16, .page_size = 1, .window_left = 200},
      {.cached = {113, 0, 40}, .Nq = 4, .Nnew = 1, .Hq = 6, .Hkv = 3, .d = 64, .dv = 64, .k = 100,
       .dtype = DType::kF16, .cache_dtype = DType::kF16, .page_size = 256, .packed = true, .causal = false},
      {.cached = {1024, 5}, .Nq = 1, .Nnew = 1, .Hq = 8, .Hkv = 1, .d = 576, .dv = 512, .k = 2048,
       .packed = true, .values_in_keys = true, .sinks = true, .alibi = true},
  };
  std::uint64_t seed = 100;
  for (const DecodeCaseSpec& c : cases) ExpectDecodeMatchesOracle(c, ++seed, TargetsUnderTest());
}

TEST(SelectedKeys, DecodeQuantizedCachesMatchTheOracleOnTheDequantizedCache) {
  const std::vector<std::int64_t> int8_targets = TargetsUnderTest(decode_kernel::Int8KernelTargets());
  std::uint64_t seed = 200;
  for (CacheElement element : {CacheElement::kInt8, CacheElement::kFp8E4M3, CacheElement::kFp8E5M2}) {
    const std::vector<std::int64_t>& targets = element == CacheElement::kInt8 ? int8_targets : TargetsUnderTest();
    for (std::int64_t group : {0, 32}) {
      ExpectDecodeMatchesOracle({.cached = {300, 17}, .Nq = 2, .Nnew = 2, .Hq = 4, .Hkv = 2, .d = 128, .dv = 128,
                                 .k = 64, .element = element, .group_size = group, .page_size = group == 0 ? 0 : 16,
                                 .sinks = true},
                                ++seed, targets);
    }
    ExpectDecodeMatchesOracle({.cached = {1025, 7, 0}, .Nq = 1, .Nnew = 1, .Hq = 16, .Hkv = 1, .d = 576, .dv = 512,
                               .k = 2048, .dtype = DType::kBF16, .element = element, .group_size = 64,
                               .page_size = 256, .packed = true, .values_in_keys = true},
                              ++seed, targets);
  }
}

// The int8 cache's integer options read the same selected keys: within their rounding of the float path.
TEST(SelectedKeys, Int8IntegerOptionsStayCloseToTheFloatPath) {
  const DecodeCaseSpec c{.cached = {300, 17}, .Nq = 2, .Nnew = 1, .Hq = 8, .Hkv = 2, .d = 128, .dv = 128,
                         .k = 64, .element = CacheElement::kInt8, .page_size = 16};
  SelectedDecode float_path(c, 77);
  decode(float_path.params());
  const std::vector<std::byte> want = float_path.Output();
  OnTargets(TargetsUnderTest(decode_kernel::Int8KernelTargets()), [&] {
    SelectedDecode integer(c, 77);
    integer.params().quantize_query_int8 = true, integer.params().quantize_probs_u8 = true;
    decode(integer.params());
    const std::vector<std::byte> got = integer.Output();
    double worst = 0;
    for (std::size_t e = 0; e < got.size() / 4; ++e) {
      worst = std::max(worst, std::abs(static_cast<double>(LoadAsFloat(got.data(), DType::kF32, e)) -
                                       LoadAsFloat(want.data(), DType::kF32, e)));
    }
    EXPECT_LE(worst, 0.01);  // 0.002 seen
  });
}

// ---- refused calls ------------------------------------------------------------------------------------------

template <class Call>
void ExpectRefused(Call&& call, const std::vector<std::string>& words) {
  try {
    call();
    ADD_FAILURE() << "not refused; expected an error naming " << words.front();
  } catch (const Error& e) {
    for (const std::string& word : words) EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
  }
}

TEST(SelectedKeys, HostileDecodeListsAreRefusedWithNothingWritten) {
  const DecodeCaseSpec c{.cached = {50, 20}, .Nq = 2, .Nnew = 1, .Hq = 4, .Hkv = 2, .d = 32, .dv = 32, .k = 8,
                         .page_size = 16};
  // Row 1 of sequence 1, K/V head 1 (its list at row 3 of key_indices): Nk = 21, its diagonal 20.
  const std::int64_t at = (3 * 2 + 1) * 8;
  const auto refused = [&](const auto& edit, const std::vector<std::string>& words) {
    SelectedDecode call(c, 5);
    edit(call);
    const std::vector<std::byte> before = call.Snapshot();
    ExpectRefused([&] { decode(call.params()); }, words);
    EXPECT_TRUE(before == call.Snapshot()) << "a refused call wrote its outputs or the cache";
  };
  refused([&](SelectedDecode& s) { s.lists()[at] = 3, s.lists()[at + 5] = 3; },
          {"key_indices[1][1] of K/V head 1", "holds 3", "twice"});
  refused([&](SelectedDecode& s) { s.lists()[at + 2] = 21; },
          {"key_indices[1][1] of K/V head 1", "holds 21", "21 keys"});
  refused([&](SelectedDecode& s) { s.lists()[at + 2] = -2; }, {"key_indices[1][1]", "holds -2", "-1"});
  refused([&](SelectedDecode& s) {
    s.params().causal = true;
    s.lists()[(2 * 2 + 1) * 8 + 4] = 20;  // row 0 of sequence 1 sits on diagonal 19
  }, {"key_indices[1][0] of K/V head 1", "holds 20", "causal diagonal 19"});
  refused([&](SelectedDecode& s) {
    s.params().window_left = 2;
    std::fill(s.lists().begin(), s.lists().end(), -1);
    s.lists()[at + 1] = 10;
  }, {"key_indices[1][1]", "holds 10", "sliding window [18, 20]"});
  refused([&](SelectedDecode& s) { s.params().key_indices.count = 0; }, {"key_indices.count", ">= 1"});
  // Packed: sequence 1's rows are 1 and 2 of key_indices (Nq_b = 1, 2).
  DecodeCaseSpec packed = c;
  packed.packed = true;
  SelectedDecode call(packed, 6);
  call.lists()[(2 * 2 + 1) * 8 + 3] = 999;
  const std::vector<std::byte> before = call.Snapshot();
  ExpectRefused([&] { decode(call.params()); },
                {"key_indices[2] (sequence 1, query row 1) of K/V head 1", "holds 999 at slot 3"});
  EXPECT_TRUE(before == call.Snapshot()) << "a refused packed call wrote its outputs or the cache";
  refused([&](SelectedDecode& s) { s.params().key_indices = {nullptr, 4}; }, {"key_indices.count=4", "null"});
}

TEST(SelectedKeys, HostileForwardListsAndCombinationsAreRefusedWithNothingWritten) {
  const ForwardCase c{.shape = {.Nq = 9, .Nk = 12, .Hq = 2, .Hkv = 1, .d = 16, .dv = 16}, .k = 4, .causal = true};
  const auto refused = [&](const auto& edit, const std::vector<std::string>& words) {
    Problem problem(c.shape, {.causal = true}, 3);
    std::vector<std::int32_t> lists = ForwardLists(c, 3);
    problem.params().key_indices = {lists.data(), c.k};
    edit(problem.params(), lists);
    const std::vector<float> before = OutputValues(problem);
    ExpectRefused([&] { forward(problem.params()); }, words);
    EXPECT_TRUE(BitwiseEqual(before, OutputValues(problem))) << "a refused call wrote its outputs";
  };
  // Row 4's diagonal is 7.
  refused([](AttentionParams&, std::vector<std::int32_t>& l) { l[4 * 4] = 8; },
          {"key_indices[0][4] of K/V head 0", "holds 8", "causal diagonal 7"});
  refused([](AttentionParams&, std::vector<std::int32_t>& l) { l[4 * 4] = 2, l[4 * 4 + 3] = 2; }, {"holds 2", "twice"});
  refused([](AttentionParams& p, std::vector<std::int32_t>& l) { p.causal = false, l[1] = 12; },
          {"holds 12", "seqlen_k"});
  refused([](AttentionParams& p, std::vector<std::int32_t>&) { p.key_indices.count = -1; }, {"key_indices.count"});
  std::vector<std::uint8_t> mask(2 * 9 * 12, 1);
  refused([&](AttentionParams& p, std::vector<std::int32_t>&) {
    p.mask = {MaskKind::kBool, mask.data(), 2 * 9 * 12, 9 * 12, 12, 1};
  }, {"key_indices", "mask"});
  refused([](AttentionParams& p, std::vector<std::int32_t>&) { p.dropout_p = 0.1f; }, {"key_indices", "dropout"});
}

TEST(SelectedKeys, BackwardIsRefused) {
  Problem problem({.Nq = 4, .Nk = 4, .Hq = 1, .Hkv = 1, .d = 16, .dv = 16}, {}, 9);
  const std::vector<std::int32_t> lists(4, 0);
  problem.params().key_indices = {lists.data(), 1};
  BackwardParams p;
  p.attention = problem.params();
  ExpectRefused([&] { backward(p); }, {"attention.key_indices", "backward"});
}

}  // namespace
}  // namespace flashattn::testing
