// Block masks and document ids in decode: every compiled SIMD target against a float64 oracle over exactly the
// keys the mask leaves each row (partial blocks: the band and the row's document; full blocks: whole; every
// other block: none), contiguous and paged caches (pages of 1 and 16), appends in the same call, Nq 1, 5 and
// 97, masks of one list for every head and of one per query head (grouped heads with different lists), rows
// that see nothing, attention sinks, an int8 cache against its dequantized values; and the refused inputs, with
// nothing written.
#include <algorithm>
#include <cmath>
#include <cstdint>
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
#include "test_targets.h"

namespace flashattn::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
enum Block : std::uint8_t { kAbsent, kPartial, kFull };

struct Case {
  std::vector<std::int32_t> cached = {100};
  std::int64_t Nq = 1, Nnew = 0, Hq = 4, Hkv = 2, d = 64, dv = 64;
  std::int64_t Qb = 4, Kb = 16;
  std::int64_t mask_heads = 1;  // 1 or Hq; 0: no block mask
  bool full_blocks = true;      // a full list besides the partial one
  bool documents = false;
  bool causal = true;
  std::int64_t window_left = -1;
  std::int64_t page_size = 0;
  DType dtype = DType::kF32, cache_dtype = DType::kF32;
  CacheElement element = CacheElement::kFloat;
  bool sinks = false;
  std::string ToString() const {
    std::string text = "cached={";
    for (std::int32_t n : cached) text += std::to_string(n) + ",";
    return text + "} Nq=" + std::to_string(Nq) + " Nnew=" + std::to_string(Nnew) + " Hq=" + std::to_string(Hq) +
           " Hkv=" + std::to_string(Hkv) + " d=" + std::to_string(d) + " Qb=" + std::to_string(Qb) +
           " Kb=" + std::to_string(Kb) + " mask_heads=" + std::to_string(mask_heads) +
           (full_blocks ? " full" : "") + (documents ? " documents" : "") + (causal ? " causal" : "") +
           " window_left=" + std::to_string(window_left) + " page_size=" + std::to_string(page_size) +
           " cache=" + std::string(to_string(element)) + "/" + std::string(to_string(cache_dtype)) +
           (sinks ? " sinks" : "");
  }
};

// A decode call over a cache filled beforehand by decode itself (so every element type is written as decode
// writes it), with a random block mask and documents, its buffers, and the oracle.
class MaskedDecode {
 public:
  MaskedDecode(const Case& c, std::uint64_t seed) : c_(c), rng_(seed) {
    const auto batch = static_cast<std::int64_t>(c.cached.size());
    const std::int64_t max_cached = *std::max_element(c.cached.begin(), c.cached.end());
    DecodeParams& p = p_;
    p.heads_q = c.Hq, p.heads_kv = c.Hkv, p.head_dim = c.d, p.head_dim_v = c.dv, p.dtype = c.dtype;
    p.causal = c.causal, p.window_left = c.window_left;
    p.batch = batch, p.cache_element = c.element, p.cache_dtype = c.cache_dtype;
    capacity_ = max_cached + std::max(c.Nnew, c.Nq) + 3;
    if (c.page_size > 0) {
      p.page_size = c.page_size, p.max_pages = (capacity_ + c.page_size - 1) / c.page_size;
      capacity_ = p.max_pages * p.page_size;
      p.num_pages = batch * p.max_pages + 2, p.block_table_stride = p.max_pages;
      std::vector<std::int32_t> pages(static_cast<std::size_t>(p.num_pages));
      std::iota(pages.begin(), pages.end(), 0);
      std::shuffle(pages.begin(), pages.end(), rng_);
      block_table_.assign(pages.begin(), pages.begin() + batch * p.max_pages);
      p.block_table = block_table_.data();
    } else {
      p.cache_seqlen_max = capacity_;
    }
    p.seqlen_q = c.Nq, p.seqlen_new = c.Nnew;
    p.set_contiguous_strides();
    const std::int64_t outer = c.page_size > 0 ? p.num_pages : batch, seq = c.page_size > 0 ? c.page_size : capacity_;
    const std::int64_t cache_elements = outer * seq * c.Hkv * std::max(c.d, c.dv);
    k_cache_.assign(static_cast<std::size_t>(cache_elements * CacheElementBytes(p)), std::byte{0x11});
    v_cache_.assign(static_cast<std::size_t>(cache_elements * CacheElementBytes(p)), std::byte{0x22});
    p.k_cache = k_cache_.data(), p.v_cache = v_cache_.data();
    if (c.element != CacheElement::kFloat) {
      k_scale_.assign(static_cast<std::size_t>(outer * seq * c.Hkv), 1.0f), v_scale_ = k_scale_;
      p.k_scale = k_scale_.data(), p.v_scale = v_scale_.data();
    }
    Fill(max_cached);
    q_ = Random(batch * c.Nq * c.Hq * c.d, c.dtype);
    k_new_ = Random(batch * c.Nnew * c.Hkv * c.d, c.dtype);
    v_new_ = Random(batch * c.Nnew * c.Hkv * c.d, c.dtype);  // rows of d (new_strides)
    o_.assign(static_cast<std::size_t>(batch * c.Nq * c.Hq * c.dv * size_of(c.dtype)), std::byte{0x7f});
    lse_.assign(static_cast<std::size_t>(batch * c.Nq * c.Hq), 12345.0f);
    p.q = q_.data(), p.o = o_.data(), p.lse = lse_.data(), p.cache_seqlens = c_.cached.data();
    if (c.Nnew > 0) p.k_new = k_new_.data(), p.v_new = v_new_.data();
    for (std::int64_t h = 0; h < c.Hq; ++h) sinks_.push_back(0.3f * static_cast<float>(h) - 0.5f);
    if (c.sinks) p.sinks = sinks_.data();
    if (c.documents) MakeDocuments();
    if (c.mask_heads > 0) MakeMask();
  }

  DecodeParams& params() { return p_; }
  std::vector<std::int32_t>& kv_indices() { return kv_indices_; }
  std::vector<std::int32_t>& kv_num_blocks() { return kv_num_blocks_; }
  std::vector<std::int32_t>& full_kv_indices() { return full_kv_indices_; }
  std::vector<std::int32_t>& documents() { return documents_; }
  std::int64_t Tq() const { return (c_.Nq + c_.Qb - 1) / c_.Qb; }
  std::int64_t width() const { return width_; }

  std::vector<std::byte> Snapshot() const {
    std::vector<std::byte> all(o_);
    all.insert(all.end(), k_cache_.begin(), k_cache_.end());
    all.insert(all.end(), v_cache_.begin(), v_cache_.end());
    const auto* lse = reinterpret_cast<const std::byte*>(lse_.data());
    all.insert(all.end(), lse, lse + lse_.size() * sizeof(float));
    return all;
  }

  // Row i of query head h of sequence b sees key j (j < Nk_b).
  bool Sees(std::int64_t b, std::int64_t i, std::int64_t h, std::int64_t j) const {
    const std::int64_t Nk = c_.cached[b] + c_.Nnew, diagonal = i + Nk - c_.Nq;
    const bool in_band = (!c_.causal || j <= diagonal) && (c_.window_left < 0 || j >= diagonal - c_.window_left);
    const bool same_document = !c_.documents || documents_[b * capacity_ + diagonal] == documents_[b * capacity_ + j];
    if (c_.mask_heads == 0) return in_band && same_document;
    const std::int64_t mh = c_.mask_heads == 1 ? 0 : h;
    const Block block = classes_[((b * c_.mask_heads + mh) * Tq() + i / c_.Qb) * width_ + j / c_.Kb];
    return block == kFull || (block == kPartial && in_band && same_document);
  }

  // Each row against the float64 softmax over the keys it sees in the cache as the call left it (dequantized).
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
    const double tolerance = c_.dtype == DType::kF32 ? 2e-5 : 2e-3;
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t i = 0; i < c_.Nq; ++i)
        for (std::int64_t h = 0; h < c_.Hq; ++h) {
          const std::int64_t q_at = p.row_offset(p.q_strides, b, i, h);
          std::vector<double> s, o(static_cast<std::size_t>(c_.dv), 0.0);
          std::vector<std::vector<float>> V;
          const double sink = c_.sinks ? sinks_[h] : -kInf;  // in the softmax, with no value
          double m = sink;
          for (std::int64_t j = 0; j < c_.cached[b] + c_.Nnew; ++j) {
            if (!Sees(b, i, h, j)) continue;
            const std::vector<float> k = cache_row(p.k_cache, p.k_scale, b, j, h / G, c_.d);
            double dot = 0;
            for (std::int64_t e = 0; e < c_.d; ++e) dot += LoadAsFloat(p.q, p.dtype, q_at + e) * double{k[e]};
            s.push_back(scale * dot), m = std::max(m, s.back());
            V.push_back(cache_row(p.v_cache, p.v_scale, b, j, h / G, c_.dv));
          }
          double l = sink == -kInf ? 0.0 : std::exp(sink - m);
          for (std::size_t c = 0; c < s.size(); ++c) {
            const double w = std::exp(s[c] - m);
            l += w;
            for (std::int64_t e = 0; e < c_.dv; ++e) o[e] += w * V[c][e];
          }
          const std::string where = c_.ToString() + " b=" + std::to_string(b) + " i=" + std::to_string(i) +
                                    " h=" + std::to_string(h);
          const std::int64_t o_at = p.row_offset(p.o_strides, b, i, h);
          double worst = 0;
          for (std::int64_t e = 0; e < c_.dv; ++e) {
            const double want = l == 0 ? 0.0 : o[e] / l, got = LoadAsFloat(p.o, p.dtype, o_at + e);
            worst = std::max(worst, std::isnan(got) ? kInf : std::abs(got - want));
          }
          EXPECT_LE(worst, tolerance) << where;
          const float lse = p.lse[p.lse_index(b, h, i)];
          if (l == 0) {
            EXPECT_EQ(lse, -std::numeric_limits<float>::infinity()) << where;
          } else {
            EXPECT_NEAR(lse, m + std::log(l), 1e-4 * std::max(1.0, std::abs(m + std::log(l)))) << where;
          }
          if (::testing::Test::HasFailure()) return;
        }
  }

 private:
  std::vector<std::byte> Random(std::int64_t n, DType dtype) {
    std::vector<std::byte> x(static_cast<std::size_t>(n * size_of(dtype)));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (std::int64_t e = 0; e < n; ++e) StoreFromFloat(x.data(), dtype, e, u(rng_));
    return x;
  }
  // Writes `n` keys into every sequence's cache (the call's cache_seqlens then say how many count).
  void Fill(std::int64_t n) {
    DecodeParams fill = p_;
    fill.seqlen_q = 0, fill.seqlen_new = n, fill.q = nullptr, fill.o = nullptr, fill.lse = nullptr;
    fill.set_contiguous_strides();
    const std::vector<std::int32_t> empty(static_cast<std::size_t>(p_.batch), 0);
    fill.cache_seqlens = empty.data();
    const std::vector<std::byte> k = Random(p_.batch * n * c_.Hkv * c_.d, c_.dtype);
    const std::vector<std::byte> v = Random(p_.batch * n * c_.Hkv * c_.d, c_.dtype);
    fill.k_new = k.data(), fill.v_new = v.data();
    decode(fill);
    p_.scale_strides = fill.scale_strides;
  }
  // Runs of 1 to 40 positions share a document.
  void MakeDocuments() {
    documents_.resize(static_cast<std::size_t>(p_.batch * capacity_));
    std::int32_t id = 0;
    for (std::int64_t at = 0; at < p_.batch * capacity_;) {
      const std::int64_t run = std::uniform_int_distribution<std::int64_t>(1, 40)(rng_);
      for (std::int64_t e = 0; e < run && at < p_.batch * capacity_; ++e) documents_[at++] = id;
      ++id;
    }
    p_.document_ids = documents_.data();
  }
  // Each (sequence, head, query block) gives each key block of its sequence a random class (a query block in
  // seven sees none), listed in a random order.
  void MakeMask() {
    const std::int64_t batch = p_.batch, H = c_.mask_heads;
    for (std::int64_t b = 0; b < batch; ++b) width_ = std::max(width_, (c_.cached[b] + c_.Nnew + c_.Kb - 1) / c_.Kb);
    const std::int64_t lists = batch * H * Tq();
    classes_.assign(static_cast<std::size_t>(lists * width_), kAbsent);
    kv_num_blocks_.assign(static_cast<std::size_t>(lists), 0), full_kv_num_blocks_ = kv_num_blocks_;
    kv_indices_.assign(static_cast<std::size_t>(lists * width_), 0), full_kv_indices_ = kv_indices_;
    std::uniform_int_distribution<int> pick(0, 99);
    for (std::int64_t list = 0; list < lists; ++list) {
      const std::int64_t b = list / (H * Tq()), Tk = (c_.cached[b] + c_.Nnew + c_.Kb - 1) / c_.Kb;
      std::vector<std::int32_t> order(static_cast<std::size_t>(Tk));
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng_);
      const bool none = list % 7 == 3;
      for (std::int32_t block : order) {
        const int roll = pick(rng_);
        const Block kind = none || roll < 35 ? kAbsent : roll < 75 || !c_.full_blocks ? kPartial : kFull;
        classes_[list * width_ + block] = kind;
        if (kind == kPartial) kv_indices_[list * width_ + kv_num_blocks_[list]++] = block;
        if (kind == kFull) full_kv_indices_[list * width_ + full_kv_num_blocks_[list]++] = block;
      }
    }
    BlockMask& m = p_.block_mask;
    m.block_size_q = c_.Qb, m.block_size_k = c_.Kb, m.heads = H;
    m.kv_num_blocks = kv_num_blocks_.data(), m.kv_indices = kv_indices_.data(), m.kv_width = width_;
    if (c_.full_blocks) {
      m.full_kv_num_blocks = full_kv_num_blocks_.data(), m.full_kv_indices = full_kv_indices_.data();
      m.full_kv_width = width_;
    }
  }

  Case c_;
  std::mt19937_64 rng_;
  DecodeParams p_;
  std::int64_t capacity_ = 0, width_ = 0;
  std::vector<Block> classes_;
  std::vector<std::int32_t> block_table_, documents_, kv_num_blocks_, kv_indices_, full_kv_num_blocks_,
      full_kv_indices_;
  std::vector<std::byte> k_cache_, v_cache_, q_, k_new_, v_new_, o_;
  std::vector<float> k_scale_, v_scale_, lse_, sinks_;
};

void ExpectMatchesOracle(const Case& c, std::uint64_t seed, const std::vector<std::int64_t>& targets) {
  for (std::int64_t target : targets) {
    simd::RestrictTargetForTest(target);
    SCOPED_TRACE(simd::TargetName(target));
    MaskedDecode call(c, seed);
    decode(call.params());
    call.ExpectMatchesOracle();
  }
  simd::RestrictTargetForTest(0);
}

TEST(DecodeBlockMask, MatchesTheOracleOnEveryTarget) {
  const std::vector<Case> cases = {
      {.cached = {100, 37}, .Nq = 1, .Nnew = 1},
      {.cached = {90, 200}, .Nq = 5, .Nnew = 5, .Hq = 8, .Hkv = 2, .d = 59, .dv = 40, .Qb = 2, .Kb = 7,
       .mask_heads = 8, .documents = true, .page_size = 16},
      {.cached = {300}, .Nq = 97, .Nnew = 0, .Hq = 4, .Hkv = 1, .d = 111, .dv = 111, .Qb = 32, .Kb = 64,
       .mask_heads = 4, .full_blocks = false, .window_left = 50, .page_size = 1},
      {.cached = {60, 5}, .Nq = 5, .Nnew = 3, .Hq = 2, .Hkv = 2, .Qb = 128, .Kb = 128, .documents = true,
       .causal = false, .dtype = DType::kF16, .cache_dtype = DType::kF16},
      {.cached = {150, 30}, .Nq = 5, .Nnew = 5, .Hq = 6, .Hkv = 3, .mask_heads = 0, .documents = true,
       .window_left = 20, .page_size = 16},
      {.cached = {70, 9}, .Nq = 5, .Nnew = 1, .Hq = 4, .Hkv = 1, .Qb = 1, .Kb = 8, .mask_heads = 4,
       .documents = true, .sinks = true},
  };
  std::uint64_t seed = 40;
  for (const Case& c : cases) ExpectMatchesOracle(c, ++seed, TargetsUnderTest());
}

TEST(DecodeBlockMask, Int8CacheMatchesTheOracleOnTheDequantizedCache) {
  const Case c{.cached = {200, 64}, .Nq = 5, .Nnew = 2, .Hq = 4, .Hkv = 2, .d = 128, .dv = 128, .Kb = 32,
               .mask_heads = 4, .documents = true, .page_size = 16, .element = CacheElement::kInt8};
  ExpectMatchesOracle(c, 7, TargetsUnderTest(decode_kernel::Int8KernelTargets()));
}

template <class Call>
void ExpectRefused(Call&& call, const std::vector<std::string>& words) {
  try {
    call();
    ADD_FAILURE() << "not refused; expected an error naming " << words.front();
  } catch (const Error& e) {
    for (const std::string& word : words) EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
  }
}

TEST(DecodeBlockMask, HostileInputsAreRefusedWithNothingWritten) {
  // Sequence 1 has 20 + 1 keys, 2 key blocks of 16; sequence 0 has 4.
  const Case c{.cached = {50, 20}, .Nq = 2, .Nnew = 1, .Qb = 1, .Kb = 16, .mask_heads = 4, .documents = true,
               .page_size = 16};
  const auto refused = [&](const auto& edit, const std::vector<std::string>& words) {
    MaskedDecode call(c, 5);
    edit(call);
    const std::vector<std::byte> before = call.Snapshot();
    ExpectRefused([&] { decode(call.params()); }, words);
    EXPECT_TRUE(before == call.Snapshot()) << "a refused call wrote its outputs or the cache";
  };
  // List (b 1, head 2, query block 1).
  const auto list = [&](MaskedDecode& s) { return ((1 * 4 + 2) * s.Tq() + 1); };
  refused([&](MaskedDecode& s) {
    s.kv_num_blocks()[list(s)] = 1, s.kv_indices()[list(s) * s.width()] = 2;
  }, {"block_mask.kv_indices[1, 2, 1, 0]", "[0, 2)", "got 2"});
  refused([&](MaskedDecode& s) {
    s.kv_num_blocks()[list(s)] = 2, s.kv_indices()[list(s) * s.width()] = 1, s.kv_indices()[list(s) * s.width() + 1] = 1;
  }, {"key block 1", "twice"});
  refused([&](MaskedDecode& s) { s.kv_num_blocks()[list(s)] = static_cast<std::int32_t>(s.width() + 1); },
          {"block_mask.kv_num_blocks[1, 2, 1]", "got"});
  refused([&](MaskedDecode& s) { s.params().block_mask.heads = 2; }, {"block_mask.heads", "heads_q=4"});
  refused([&](MaskedDecode& s) { s.params().document_ids_batch_stride = 3; }, {"document_ids_batch_stride"});
  const std::vector<std::int32_t> keys(static_cast<std::size_t>(2 * 2 * 2 * 1), 0);
  refused([&](MaskedDecode& s) { s.params().key_indices = {keys.data(), 1}; }, {"key_indices", "block mask"});
  const std::vector<std::int32_t> cu = {0, 1, 2};
  refused([&](MaskedDecode& s) { s.params().cu_seqlens_q = cu.data(), s.params().seqlen_new = 0; },
          {"packed queries", "cu_seqlens_q"});
  // Sequence 1 with no keys has 2 query rows but no position for them.
  MaskedDecode rows_before_the_keys({.cached = {30, 0}, .Nq = 2, .mask_heads = 0, .documents = true}, 6);
  const std::vector<std::byte> before = rows_before_the_keys.Snapshot();
  ExpectRefused([&] { decode(rows_before_the_keys.params()); }, {"document_ids", "seqlen_q=2", "sequence 1"});
  EXPECT_TRUE(before == rows_before_the_keys.Snapshot()) << "a refused call wrote its outputs or the cache";
}

}  // namespace
}  // namespace flashattn::testing
