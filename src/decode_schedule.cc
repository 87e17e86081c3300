// decode(): validates the call whole, then schedules its sequences over the two kernels. A sequence with many
// query rows per query head (a prefill chunk over a cache) runs through the forward kernel's register tiles, over
// its keys gathered from the cache into contiguous rows; the others go through the decode kernel's split-KV
// steps, which first append the new keys of every sequence (decode/decode.h). docs/python.md describes the rule.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/element.h"
#include "common/quantize.h"
#include "common/rotary.h"
#include "common/score.h"
#include "decode/decode.h"
#include "flashattn/decode.h"
#include "flashattn/forward.h"
#include "forward/forward.h"
#include "simd/scratch.h"

namespace flashattn {
namespace {

// When a sequence runs through the forward kernel: from kForwardRowsPerKvHead query rows per K/V head (G·Nq_b)
// and kForwardQueryRows per query head. The decode kernel reads each key once for a block of at most 64 rows
// of a K/V head, so from 256 rows on it reads every key four times or more; the forward kernel reuses each
// loaded key over register tiles of one head's rows, and pays for packing each K/V head's keys once, which a
// head needs 64 rows or more to amortize (measured on Zen 5 over 4096 keys, d 128: G = 4 breaks even at about
// Nq = 64, G = 1 at about Nq = 256).
constexpr std::int64_t kForwardRowsPerKvHead = 256;
constexpr std::int64_t kForwardQueryRows = 64;
// Gathered K and V bytes per forward call: a sequence's K/V heads are gathered in groups within this budget,
// which with the forward kernel's own packed K and V stays within the working memory a thread keeps.
constexpr std::int64_t kGatherBytes = std::int64_t{16} << 20;

// The part of sequence b the forward kernel computes: its keys [begin, end) that some row sees, and whether it
// goes there at all (float arithmetic, enough rows, at least one key; the integer options are the decode
// kernel's own arithmetic, and so are row lists, each row reading its own: selected keys, or the keys a block mask
// and document ids leave it).
struct ForwardPlan {
  bool runs = false;
  IndexRange keys;
};

ForwardPlan PlanForward(const DecodeParams& p, std::int64_t b) {
  const std::int64_t Nq = p.query_rows(b), Nk = p.cache_seqlens[b] + p.new_rows(b);
  const std::int64_t G = p.heads_q / p.heads_kv;
  if (p.quantize_query_int8 || p.quantize_probs_u8 || decode_kernel::RowLists(p) || Nq < kForwardQueryRows ||
      G * Nq < kForwardRowsPerKvHead) {
    return {};
  }
  const std::int64_t offset = DecodeDiagonalOffset(p, b, Nk);
  const IndexRange keys = Band::Of(p).KeysOfDiagonals(offset, offset + Nq - 1, Nk);
  return {keys.end > keys.begin, keys};
}

// The forward calls of the sequences the decode kernel leaves out: per sequence, per group of K/V heads,
// the group's keys and values gathered as rows of `element_` (the queries' type when the cache holds exactly
// it; float32 otherwise, which holds every cache element and dequantized value exactly) and its query rows
// (rotated, rounded to dtype) beside them. All memory is allocated before the cache is touched.
class ForwardSequences {
 public:
  explicit ForwardSequences(const DecodeParams& p)
      : p_(p),
        element_(!Quantized(p.cache_element) && p.cache_dtype == p.dtype ? p.dtype : DType::kF32),
        bytes_(static_cast<std::int64_t>(size_of(element_))) {
    plans_.reserve(static_cast<std::size_t>(p.batch));
    for (std::int64_t b = 0; b < p.batch; ++b) {
      plans_.push_back(PlanForward(p, b));
      if (plans_.back().runs) Reserve(b);
    }
    if (sizes_.lse == 0) return;  // no sequence for the forward kernel
    k_ = simd::AllocateOrThrow<std::byte>(sizes_.k), v_ = simd::AllocateOrThrow<std::byte>(sizes_.v);
    q_ = simd::AllocateOrThrow<std::byte>(sizes_.q), o_ = simd::AllocateOrThrow<float>(sizes_.o);
    lse_ = simd::AllocateOrThrow<float>(sizes_.lse);
  }

  decode_kernel::KernelSequences LeftToDecode() const {
    decode_kernel::KernelSequences sequences;
    for (const ForwardPlan& plan : plans_) sequences.left_out.push_back(plan.runs);
    return sequences;
  }

  void Run() {
    for (std::int64_t b = 0; b < p_.batch; ++b) {
      if (!plans_[static_cast<std::size_t>(b)].runs) continue;
      const std::int64_t group = HeadsPerCall(b);
      for (std::int64_t hk0 = 0; hk0 < p_.heads_kv; hk0 += group) RunHeads(b, hk0, std::min(group, p_.heads_kv - hk0));
    }
  }

 private:
  std::int64_t KeysOf(std::int64_t b) const {
    const IndexRange& keys = plans_[static_cast<std::size_t>(b)].keys;
    return keys.end - keys.begin;
  }
  std::int64_t RowWidth() const { return p_.head_dim + (p_.values_in_keys() ? 0 : p_.value_head_dim()); }
  std::int64_t HeadsPerCall(std::int64_t b) const {
    return std::clamp<std::int64_t>(kGatherBytes / (KeysOf(b) * RowWidth() * bytes_), 1, p_.heads_kv);
  }
  void Reserve(std::int64_t b);
  void GatherKeys(std::int64_t b, std::int64_t hk0, std::int64_t heads);
  void GatherQueries(std::int64_t b, std::int64_t hk0, std::int64_t heads);
  void RunHeads(std::int64_t b, std::int64_t hk0, std::int64_t heads);

  const DecodeParams& p_;
  const DType element_;
  const std::int64_t bytes_;
  std::vector<ForwardPlan> plans_;
  struct {
    std::int64_t k = 0, v = 0, q = 0, o = 0, lse = 0;  // bytes of k, v, q; floats of o, lse
  } sizes_;
  // From the calling thread's kept blocks (simd/working_memory.h): a server's steps reuse the same pages.
  simd::WorkingArray<std::byte> k_, v_, q_;
  simd::WorkingArray<float> o_, lse_;
};

void ForwardSequences::Reserve(std::int64_t b) {
  const std::int64_t heads = HeadsPerCall(b), rows = p_.query_rows(b) * heads * (p_.heads_q / p_.heads_kv);
  const auto grow = [](std::int64_t& size, std::int64_t wanted) { size = std::max(size, wanted); };
  grow(sizes_.k, KeysOf(b) * heads * p_.head_dim * bytes_);
  if (!p_.values_in_keys()) grow(sizes_.v, KeysOf(b) * heads * p_.value_head_dim() * bytes_);
  grow(sizes_.q, rows * p_.head_dim * bytes_);
  if (element_ != p_.dtype) grow(sizes_.o, rows * p_.value_head_dim());
  grow(sizes_.lse, rows);
}

// Key j of the plan (row j − begin) of K/V head hk0 + h at row (j − begin)·heads + h: K rows of d, V rows of dv.
void ForwardSequences::GatherKeys(std::int64_t b, std::int64_t hk0, std::int64_t heads) {
  const DecodeParams& p = p_;
  const IndexRange keys = plans_[static_cast<std::size_t>(b)].keys;
  const std::int64_t d = p.head_dim, dv = p.value_head_dim(), cache_bytes = CacheElementBytes(p);
  const bool copy = !Quantized(p.cache_element) && p.cache_dtype == element_;
  const Strides scale_strides = ScaleStridesOf(p);
  const auto gather = [&](const void* cache, const float* scales, std::byte* out, std::int64_t width,
                          std::int64_t j, std::int64_t h, std::vector<float>& row) {
    const std::int64_t at = CacheRowOffset(p, p.cache_strides, b, j, hk0 + h);
    std::byte* dst = out + ((j - keys.begin) * heads + h) * width * bytes_;
    if (copy) {
      std::memcpy(dst, static_cast<const char*>(cache) + at * cache_bytes, static_cast<std::size_t>(width * bytes_));
      return;
    }
    const float* row_scales = scales == nullptr ? nullptr : scales + CacheRowOffset(p, scale_strides, b, j, hk0 + h);
    LoadCacheRow(p, cache, row_scales, at, row.data(), width);
    std::memcpy(dst, row.data(), static_cast<std::size_t>(width * 4));  // element_ is float32 here
  };
#pragma omp parallel num_threads(p.num_threads > 0 ? p.num_threads : omp_get_max_threads())
  {
    std::vector<float> row(static_cast<std::size_t>(std::max(d, dv)));
#pragma omp for schedule(static)
    for (std::int64_t j = keys.begin; j < keys.end; ++j)
      for (std::int64_t h = 0; h < heads; ++h) {
        gather(p.k_cache, p.k_scale, k_.get(), d, j, h, row);
        if (!p.values_in_keys()) gather(p.v_cache, p.value_scales(), v_.get(), dv, j, h, row);
      }
  }
}

// Query i of head hk0·G + h at row i·heads·G + h, rotated at its position and rounded to dtype, as the decode
// kernel gathers it.
void ForwardSequences::GatherQueries(std::int64_t b, std::int64_t hk0, std::int64_t heads) {
  const DecodeParams& p = p_;
  const std::int64_t d = p.head_dim, G = p.heads_q / p.heads_kv, Nq = p.query_rows(b), cached = p.cache_seqlens[b];
  std::vector<float> q(static_cast<std::size_t>(d));
  for (std::int64_t i = 0; i < Nq; ++i)
    for (std::int64_t h = 0; h < heads * G; ++h) {
      const std::int64_t src = p.row_offset(p.q_strides, b, i, hk0 * G + h);
      for (std::int64_t e = 0; e < d; ++e) q[e] = LoadAsFloat(p.q, p.dtype, src + e);
      if (p.rotary_dim > 0) {
        const std::int64_t pos = (cached + (p.rotary_queries_at_cache_end ? 0 : i)) * (p.rotary_dim / 2);
        ApplyRotary(q.data(), p.rotary_dim, p.rotary_cos + pos, p.rotary_sin + pos, p.rotary_interleaved);
        for (std::int64_t e = 0; e < d; ++e) q[e] = RoundTo(p.dtype, q[e]);
      }
      for (std::int64_t e = 0; e < d; ++e) StoreFromFloat(q_.get(), element_, (i * heads * G + h) * d + e, q[e]);
    }
}

void ForwardSequences::RunHeads(std::int64_t b, std::int64_t hk0, std::int64_t heads) {
  const DecodeParams& p = p_;
  GatherKeys(b, hk0, heads);
  GatherQueries(b, hk0, heads);
  const std::int64_t G = p.heads_q / p.heads_kv, Hq = heads * G, Nq = p.query_rows(b), Nk = p.cache_seqlens[b] + p.new_rows(b);
  const std::int64_t d = p.head_dim, dv = p.value_head_dim();
  const IndexRange keys = plans_[static_cast<std::size_t>(b)].keys;
  AttentionParams call;
  static_cast<HeadSettings&>(call) = p;  // scale, band, softcap and the head dimensions
  call.heads_q = Hq, call.heads_kv = heads, call.dtype = element_;
  call.alibi_slopes = p.alibi_slopes == nullptr ? nullptr : p.alibi_slopes + b * p.alibi_batch_stride + hk0 * G;
  call.alibi_batch_stride = 0;
  call.sinks = p.sinks == nullptr ? nullptr : p.sinks + hk0 * G;
  call.batch = 1, call.seqlen_q = Nq, call.seqlen_k = keys.end - keys.begin;
  // The rows are the last Nq positions of a sequence of Nk + keys_after keys, of which these are [begin, end).
  call.block_position = {0, keys.begin, Nq, Nk + (p.keys_after == nullptr ? 0 : p.keys_after[b])};
  call.q = q_.get(), call.k = k_.get();
  call.v = p.values_in_keys() ? k_.get() : v_.get();
  call.q_strides = {0, Hq * d, d};
  call.k_strides = {0, heads * d, d};
  call.v_strides = p.values_in_keys() ? call.k_strides : Strides{0, heads * dv, dv};
  const std::int64_t o_first = p.row_offset(p.o_strides, b, 0, hk0 * G);
  if (element_ == p.dtype) {
    call.o = static_cast<char*>(p.o) + o_first * static_cast<std::int64_t>(size_of(p.dtype));
    call.o_strides = {0, p.o_strides.seq, p.o_strides.head};
  } else {
    call.o = o_.get(), call.o_strides = {0, Hq * dv, dv};
  }
  call.lse = lse_.get();
  forward_kernel::Forward(call);
  for (std::int64_t i = 0; i < Nq; ++i)
    for (std::int64_t h = 0; h < Hq; ++h) {
      if (p.lse != nullptr) p.lse[p.lse_index(b, hk0 * G + h, i)] = lse_[h * Nq + i];
      if (element_ == p.dtype) continue;
      const float* o = o_.get() + (i * Hq + h) * dv;
      const std::int64_t dst = p.row_offset(p.o_strides, b, i, hk0 * G + h);
      for (std::int64_t e = 0; e < dv; ++e) StoreFromFloat(p.o, p.dtype, dst + e, o[e]);
    }
}

}  // namespace

void decode(const DecodeParams& p) {
  validate(p);
  ForwardSequences forward_sequences(p);
  decode_kernel::Decode(p, forward_sequences.LeftToDecode());
  forward_sequences.Run();
}

}  // namespace flashattn
