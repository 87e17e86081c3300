// Random decode problems (contiguous or paged KV caches) that own their buffers, the test's own plain
// rotary embedding, and the forward() call over the same cache contents that decode() must agree with.
#ifndef FLASHATTN_TESTS_DECODE_TEST_CASE_H_
#define FLASHATTN_TESTS_DECODE_TEST_CASE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flashattn/decode.h"
#include "flashattn/forward.h"
#include "test_problem.h"

namespace flashattn::testing {

struct DecodeShape {
  std::int64_t Nq = 1, Nnew = 0, Hq = 1, Hkv = 1, d = 16, Nmax = 64;
  std::vector<std::int32_t> cached = {10};  // cache_seqlens; its size is the batch
  DType dtype = DType::kF32;
  std::int64_t page_size = 0;  // 0 = contiguous cache
  std::string ToString() const;
};

struct DecodeMods {
  bool causal = false;
  std::int64_t window_left = -1, window_right = -1;
  float softcap = 0.0f;
  bool alibi = false;
  std::int64_t rotary_dim = 0;
  bool interleaved = false;
  std::string ToString() const;
};

// The logical cache (b, j, hk, e) for j < Nmax is drawn from the seed alone, so cases that differ only in
// page_size hold the same keys and values. Paged caches take a shuffled set of pages (plus unused ones, all
// filled with other random values); the block table has one padding column of −7 entries.
class DecodeCase {
 public:
  DecodeCase(const DecodeShape& shape, const DecodeMods& mods, std::uint64_t seed);
  DecodeCase(const DecodeCase&) = delete;
  DecodeCase& operator=(const DecodeCase&) = delete;

  DecodeParams& params() { return params_; }
  const DecodeParams& params() const { return params_; }
  const DecodeMods& mods() const { return mods_; }
  const DecodeShape& shape() const { return shape_; }
  std::int64_t batch() const { return static_cast<std::int64_t>(shape_.cached.size()); }

  // Element offset of cache row (b, j, hk) through the block table when paged.
  std::int64_t CacheOffset(std::int64_t b, std::int64_t j, std::int64_t hk) const;
  std::vector<float> KRow(std::int64_t b, std::int64_t j, std::int64_t hk) const;
  std::vector<float> VRow(std::int64_t b, std::int64_t j, std::int64_t hk) const;
  std::vector<float> QRow(std::int64_t b, std::int64_t i, std::int64_t h) const;
  std::vector<float> KNewRow(std::int64_t b, std::int64_t i, std::int64_t hk) const;
  std::vector<float> VNewRow(std::int64_t b, std::int64_t i, std::int64_t hk) const;
  float O(std::int64_t b, std::int64_t i, std::int64_t h, std::int64_t e) const;
  float Lse(std::int64_t b, std::int64_t h, std::int64_t i) const { return lse_[(b * shape_.Hq + h) * shape_.Nq + i]; }
  const float* RotaryCos(std::int64_t pos) const { return &cos_[pos * (mods_.rotary_dim / 2)]; }
  const float* RotarySin(std::int64_t pos) const { return &sin_[pos * (mods_.rotary_dim / 2)]; }

  // Raw bytes of both caches, to check what a call changed.
  std::vector<std::uint16_t> CacheSnapshot() const;
  std::vector<std::uint16_t>& k_cache() { return k_cache_; }

 private:
  DecodeShape shape_;
  DecodeMods mods_;
  DecodeParams params_;
  std::vector<std::uint16_t> q_, k_new_, v_new_, k_cache_, v_cache_, o_;  // float32 uses two slots
  std::vector<float> lse_, alibi_, cos_, sin_;
  std::vector<std::int32_t> cache_seqlens_, block_table_;
};

// x[0, rotary_dim) rotated by angle θ_c (cos, sin) per pair, written as the complex product
// (x0 + i·x1)·e^{iθ}, in float64: the test's own statement of GPT-J (interleaved) and GPT-NeoX rotary.
std::vector<float> PlainRotary(std::vector<float> x, std::int64_t rotary_dim, const float* cos, const float* sin,
                               bool interleaved);

// What decode() must compute for sequence b, from the cache contents after the call: forward() over Nq
// (rotated) queries and the Nk = cached + Nnew keys, with the same masks. O is (Nq, Hq, d), LSE (Hq, Nq).
struct ForwardResult {
  std::vector<float> O, lse;
};
ForwardResult ForwardOverCache(const DecodeCase& c, std::int64_t b, std::optional<Algorithm> algorithm);

// The errors (test_problem.h's Errors) of decode()'s O and LSE against forward() over each sequence's cache.
Errors CompareWithForward(const DecodeCase& c, std::optional<Algorithm> algorithm);

}  // namespace flashattn::testing

#endif  // FLASHATTN_TESTS_DECODE_TEST_CASE_H_
