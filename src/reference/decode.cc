// Flash-Decoding, readable and in float64. For sequence b with Nq = Nq_b query rows and Nk = cache_seqlens[b] +
// Nnew keys (Nnew = Nq_b for packed queries that append; rows found through cu_seqlens_q when packed):
//   append: K[cache_seqlens[b] + i] = rotary(k_new[i]),  V[cache_seqlens[b] + i] = v_new[i]
//   for each query head h and row i (diagonal i + Nk − Nq, rotated q at position cache_seqlens[b] + i,
//   or cache_seqlens[b] with rotary_queries_at_cache_end):
//     split the keys [0, Nk) into num_splits chunks C_k; per chunk the state
//       LSE_k = log Σ_{j∈C_k} e^{S_ij},  O_k = Σ_{j∈C_k} e^{S_ij − LSE_k} v_j
//     and O, LSE = MergeStates(... MergeStates(state_0, state_1) ..., state_last), then merged once with the
//     attention sink's state (LSE = s_h, O = 0) when the head has one
// With V inside the K cache (v_cache == k_cache) V is the first dv features of each K row, and an append
// writes the K row only.
// Keys are looked up one at a time through the block table when the cache is paged, and read as float32 in
// the cache's element type: a quantized cache's values times their scales (common/quantize.h), which is
// also how appended keys are stored. A key the row does not
// see (window, causal) takes no part — not even as 0·v_j, which would be NaN for an inf or NaN in v_j — and a
// NaN score makes its row NaN (the non-finite rule of the fused kernels, docs/robustness.md).
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/constants.h"
#include "common/element.h"
#include "common/quantize.h"
#include "common/rotary.h"
#include "common/score.h"
#include "reference/reference.h"
#include "reference/softmax.h"

namespace flashattn::reference {

namespace {

// Offset of row (b, j, hk) in a tensor of (batch or page, seq, head) strides s: the cache or its scales.
std::int64_t CacheRow(const DecodeParams& p, const Strides& s, std::int64_t b, std::int64_t j, std::int64_t hk) {
  if (!p.paged()) return b * s.batch + j * s.seq + hk * s.head;
  return p.block_table[b * p.block_table_stride + j / p.page_size] * s.batch + (j % p.page_size) * s.seq +
         hk * s.head;
}

// Cache row (b, j, hk) of k_cache or v_cache (with its scales) as `width` float32 values.
std::vector<float> LoadKeyRow(const DecodeParams& p, const void* cache, const float* scales, std::int64_t b,
                              std::int64_t j, std::int64_t hk, std::int64_t width) {
  std::vector<float> row(width);
  const float* row_scales = scales == nullptr ? nullptr : scales + CacheRow(p, ScaleStridesOf(p), b, j, hk);
  LoadCacheRow(p, cache, row_scales, CacheRow(p, p.cache_strides, b, j, hk), row.data(), width);
  return row;
}

std::vector<float> LoadRow(const void* base, DType dtype, std::int64_t offset, std::int64_t d) {
  std::vector<float> row(d);
  for (std::int64_t e = 0; e < d; ++e) row[e] = LoadAsFloat(base, dtype, offset + e);
  return row;
}

void Append(const DecodeParams& p) {
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t i = 0; i < p.new_rows(b); ++i)
      for (std::int64_t hk = 0; hk < p.heads_kv; ++hk) {
        const std::int64_t j = p.cache_seqlens[b] + i;
        const std::int64_t src = p.row_offset(p.new_strides, b, i, hk);
        std::vector<float> k = LoadRow(p.k_new, p.dtype, src, p.head_dim);
        if (p.rotary_dim > 0) {
          const std::int64_t pos = j * (p.rotary_dim / 2);
          ApplyRotary(k.data(), p.rotary_dim, p.rotary_cos + pos, p.rotary_sin + pos, p.rotary_interleaved);
        }
        const std::int64_t dst = CacheRow(p, p.cache_strides, b, j, hk);
        const std::int64_t scale_row = CacheRow(p, ScaleStridesOf(p), b, j, hk);
        StoreCacheRow(p, p.k_cache, p.k_scale == nullptr ? nullptr : p.k_scale + scale_row, dst, k.data(),
                      p.head_dim);
        if (p.values_in_keys()) continue;
        const std::vector<float> v = LoadRow(p.v_new, p.dtype, src, p.value_head_dim());
        StoreCacheRow(p, p.v_cache, p.v_scale == nullptr ? nullptr : p.v_scale + scale_row, dst, v.data(),
                      p.value_head_dim());
      }
}

// The state of query q (diagonal, slope) over keys [j_begin, j_end) of (b, hk).
AttentionState ChunkState(const DecodeParams& p, const Band& band, std::int64_t b, std::int64_t hk,
                          const std::vector<float>& q, std::int64_t diagonal, float slope, std::int64_t j_begin,
                          std::int64_t j_end) {
  const std::int64_t d = p.head_dim, dv = p.value_head_dim();
  std::vector<double> S(j_end - j_begin);
  double m = kNegInfOf<double>;
  for (std::int64_t j = j_begin; j < j_end; ++j) {
    const std::vector<float> k = LoadKeyRow(p, p.k_cache, p.k_scale, b, j, hk, d);
    double q_dot_k = 0.0;
    for (std::int64_t e = 0; e < d; ++e) q_dot_k += static_cast<double>(q[e]) * k[e];
    S[j - j_begin] = band.Sees(diagonal, j)
                         ? ModifiedScore(q_dot_k, SoftmaxScale(p), p.softcap, slope, std::llabs(diagonal - j))
                         : kNegInfOf<double>;
    m = MaxKeepingNaN(m, S[j - j_begin]);
  }
  AttentionState state{std::vector<double>(dv, 0.0), m};
  if (m == kNegInfOf<double>) return state;  // no visible key in the chunk
  double l = 0.0;
  for (double s : S) l += std::exp(s - m);
  state.lse = m + std::log(l);
  for (std::int64_t j = j_begin; j < j_end; ++j) {
    if (!band.Sees(diagonal, j)) continue;
    const double P_j = std::exp(S[j - j_begin] - state.lse);
    const std::vector<float> v = LoadKeyRow(p, p.v_cache, p.value_scales(), b, j, hk, dv);
    for (std::int64_t e = 0; e < dv; ++e) state.O[e] += P_j * v[e];
  }
  return state;
}

}  // namespace

void Decode(const DecodeParams& p) {
  Append(p);
  const Band band = Band::Of(p);
  const std::int64_t d = p.head_dim, dv = p.value_head_dim(), G = p.heads_q / p.heads_kv;
  const std::int64_t splits = std::max<std::int64_t>(1, p.num_splits);
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t cached = p.cache_seqlens[b], Nk = cached + p.new_rows(b), Nq = p.query_rows(b);
    const std::int64_t chunk = (Nk + splits - 1) / splits;
    for (std::int64_t h = 0; h < p.heads_q; ++h)
      for (std::int64_t i = 0; i < Nq; ++i) {
        const std::int64_t q_row = p.row_offset(p.q_strides, b, i, h);
        std::vector<float> q = LoadRow(p.q, p.dtype, q_row, d);
        if (p.rotary_dim > 0) {
          const std::int64_t pos = (cached + (p.rotary_queries_at_cache_end ? 0 : i)) * (p.rotary_dim / 2);
          ApplyRotary(q.data(), p.rotary_dim, p.rotary_cos + pos, p.rotary_sin + pos, p.rotary_interleaved);
          for (float& x : q) x = RoundTo(p.dtype, x);
        }
        const float slope = AlibiSlope(p, b, h);
        AttentionState state{std::vector<double>(dv, 0.0), kNegInfOf<double>};
        for (std::int64_t j0 = 0; j0 < Nk; j0 += chunk) {
          const std::int64_t j1 = std::min(Nk, j0 + chunk);
          const std::int64_t diagonal = i + DecodeDiagonalOffset(p, b, Nk);
          state = MergeStates(state, ChunkState(p, band, b, h / G, q, diagonal, slope, j0, j1));
        }
        const float sink = SinkOf(p, h);
        if (sink != kNegInf) state = MergeStates(state, AttentionState{std::vector<double>(dv, 0.0), sink});
        const std::int64_t dst = p.row_offset(p.o_strides, b, i, h);
        for (std::int64_t e = 0; e < dv; ++e) StoreFromFloat(p.o, p.dtype, dst + e, static_cast<float>(state.O[e]));
        if (p.lse != nullptr) p.lse[p.lse_index(b, h, i)] = static_cast<float>(state.lse);
      }
  }
}

}  // namespace flashattn::reference
