// The lightning indexer, readable and in float64: for each query row t of sequence b, every key s it sees
// (s ≤ t + Nk − Nq when causal, else s < Nk) gets
//   I[t, s] = Σ_j w[t, j] · ReLU(q[t, j] · k[s]),   ReLU(x) = x < 0 ? 0 : x  (NaN stays NaN)
// all of them in one array; a stable sort by descending I (NaN last) keeps ties in ascending position, and
// the first top_k are the row's keys. Keys are read through the block table when the cache is paged, as
// float32 in the cache's element type (a quantized key is its scale times its code's value).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/element.h"
#include "common/quantize.h"
#include "reference/reference.h"

namespace flashattn::reference {

namespace {

struct Scored {
  double score;
  std::int32_t position;
};

// a before b: a higher score; a NaN after every number.
bool Before(const Scored& a, const Scored& b) {
  return !std::isnan(a.score) && (std::isnan(b.score) || a.score > b.score);
}

// Key s of sequence b as head_dim float32 values.
std::vector<double> KeyRow(const IndexerParams& p, std::int64_t b, std::int64_t s) {
  std::int64_t outer = b, slot = s;
  if (p.paged()) {
    outer = p.block_table[b * p.block_table_stride + s / p.page_size];
    slot = s % p.page_size;
  }
  const std::int64_t offset = outer * p.cache_strides.batch + slot * p.cache_strides.seq;
  std::vector<double> k(static_cast<std::size_t>(p.head_dim));
  if (!Quantized(p.cache_element)) {
    for (std::int64_t e = 0; e < p.head_dim; ++e) k[e] = LoadAsFloat(p.k_cache, p.cache_dtype, offset + e);
    return k;
  }
  const double scale = p.k_scale[outer * p.scale_strides.batch + slot * p.scale_strides.seq];
  const auto* codes = static_cast<const std::uint8_t*>(p.k_cache) + offset;
  VisitQuantizedElement(p.cache_element, [&](auto traits) {
    for (std::int64_t e = 0; e < p.head_dim; ++e) k[e] = scale * decltype(traits)::Decode(codes[e]);
  });
  return k;
}

double IndexScore(const IndexerParams& p, std::int64_t b, std::int64_t t, const std::vector<double>& k) {
  double I = 0.0;
  for (std::int64_t j = 0; j < p.heads; ++j) {
    const std::int64_t q_row = b * p.q_strides.batch + t * p.q_strides.seq + j * p.q_strides.head;
    double dot = 0.0;
    for (std::int64_t e = 0; e < p.head_dim; ++e) dot += LoadAsFloat(p.q, p.dtype, q_row + e) * k[e];
    const double relu = dot < 0.0 ? 0.0 : dot;
    I += static_cast<double>(p.weights[(b * p.seqlen_q + t) * p.heads + j]) * relu;
  }
  return I;
}

}  // namespace

void LightningIndexer(const IndexerParams& p) {
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t Nk = p.cache_seqlens != nullptr ? p.cache_seqlens[b] : p.cache_seqlen_max;
    std::vector<std::vector<double>> keys;
    for (std::int64_t s = 0; s < Nk; ++s) keys.push_back(KeyRow(p, b, s));
    for (std::int64_t t = 0; t < p.seqlen_q; ++t) {
      const std::int64_t seen = p.causal ? std::clamp<std::int64_t>(t + Nk - p.seqlen_q + 1, 0, Nk) : Nk;
      std::vector<Scored> scored;
      for (std::int64_t s = 0; s < seen; ++s) {
        scored.push_back({IndexScore(p, b, t, keys[s]), static_cast<std::int32_t>(s)});
      }
      std::stable_sort(scored.begin(), scored.end(), Before);
      for (std::int64_t slot = 0; slot < p.top_k; ++slot) {
        const std::int64_t out = (b * p.seqlen_q + t) * p.top_k + slot;
        const bool kept = slot < static_cast<std::int64_t>(scored.size());
        p.key_indices[out] = kept ? scored[slot].position : -1;
        if (p.scores != nullptr) {
          p.scores[out] = kept ? static_cast<float>(scored[slot].score) : -std::numeric_limits<float>::infinity();
        }
      }
    }
  }
}

}  // namespace flashattn::reference
