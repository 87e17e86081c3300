// decode()'s split-KV loop (src/decode/decode.cc) counted: the same arrays in main memory, in plain scalar
// code through the counting accessors of src/reference/problem.h, for a call without new keys.
//   for each sequence b:
//     Q_tile ← Q of all Hq heads in float32, row hk·R + g·Nq + i for query i of head hk·G + g (GatherRows)
//     [j_begin, j_end) ← the keys some row may see (Band::KeysOfDiagonals); chunk = ⌈(j_end − j_begin)/s⌉
//     for each chunk [a, e) and K/V head hk (AttendChunk):
//       if the chunk has keys: load the head's R rows of Q_tile; for each key j in [a, e): load k_j, v_j once
//         and update all R rows online (m, l, Õ)
//       store the partial O_k = Õ/l and LSE_k = m + log l of the R rows (O_k = 0, LSE_k = −∞ if no key)
//     for each row (MergeRow): load its s LSEs; load the O_k whose LSE_k is finite; store O, LSE
#include <algorithm>
#include <cmath>
#include <deque>
#include <vector>

#include "common/constants.h"
#include "common/score.h"
#include "io_model/counted.h"
#include "reference/problem.h"
#include "reference/softmax.h"

namespace flashattn::io_model {

using reference::HeadProblem;
using reference::IoCount;
using reference::MainMemoryArray;

IoCount CountDecode(const AttentionParams& params, std::int64_t splits) {
  const std::int64_t Nq = params.seqlen_q, Nk = params.seqlen_k, d = params.head_dim;
  const std::int64_t Hq = params.heads_q, Hkv = params.heads_kv, G = Hq / Hkv, R = G * Nq, rows = Hq * Nq;
  IoCount total;
  if (rows == 0) return total;  // decode() returns after the append when there are no query rows
  std::vector<float> Q_tile(rows * d);                                 // main memory, float32
  std::vector<float> O_partial(splits * rows * d), lse_partial(splits * rows);  // main memory, float32
  std::vector<float> q(Nq * d), Q(R * d), k(d), v(d), S(R), m(R), l(R), O(R * d), lse(splits), o_row(d);

  const auto [j_begin, j_end] = Band::Of(params).KeysOfDiagonals(Nk - Nq, Nk - 1, Nk);  // as decode() does
  const std::int64_t chunk = (j_end - j_begin + splits - 1) / splits;

  for (std::int64_t b = 0; b < params.batch; ++b) {
    std::deque<HeadProblem> heads;  // query head h's problem; K/V head hk's traffic goes to head hk·G's
    for (std::int64_t h = 0; h < Hq; ++h) heads.emplace_back(params, b, h);
    for (std::int64_t h = 0; h < Hq; ++h) {  // GatherRows
      const MainMemoryArray tile(heads[h], Q_tile.data(), sizeof(float));
      heads[h].LoadQ(0, Nq, q.data());
      tile.Store(((h / G) * R + (h % G) * Nq) * d, Nq * d, q.data());
    }
    for (std::int64_t s = 0; s < splits; ++s) {  // AttendChunk of chunk s, every K/V head
      const std::int64_t a = std::min(j_end, j_begin + s * chunk), e = std::min(j_end, a + chunk);
      for (std::int64_t hk = 0; hk < Hkv; ++hk) {
        const HeadProblem& kv = heads[hk * G];
        const MainMemoryArray tile(kv, Q_tile.data(), sizeof(float));
        const MainMemoryArray O_k(kv, O_partial.data(), sizeof(float));
        const MainMemoryArray lse_k(kv, lse_partial.data(), sizeof(float));
        std::fill(m.begin(), m.end(), kNegInf);
        std::fill(l.begin(), l.end(), 0.0f);
        std::fill(O.begin(), O.end(), 0.0f);
        if (a < e) tile.Load(hk * R * d, R * d, Q.data());
        for (std::int64_t j = a; j < e; ++j) {
          kv.LoadK(j, 1, k.data());
          kv.LoadV(j, 1, v.data());
          for (std::int64_t r = 0; r < R; ++r) {
            const HeadProblem& row = heads[hk * G + r / Nq];
            float q_dot_k = 0.0f;
            for (std::int64_t c = 0; c < d; ++c) q_dot_k += Q[r * d + c] * k[c];
            const float score = row.Score(r % Nq, j, q_dot_k);
            const float m_new = std::max(m[r], score);
            const float rescale = reference::RescaleFactor(m[r], m_new);  // e^{m − m_new}
            const float p = reference::RescaleFactor(score, m_new);       // e^{S − m_new}
            l[r] = rescale * l[r] + p;
            for (std::int64_t c = 0; c < d; ++c) O[r * d + c] = rescale * O[r * d + c] + p * v[c];
            m[r] = m_new;
          }
        }
        for (std::int64_t r = 0; r < R; ++r) {
          const float inv_l = l[r] == 0.0f ? 0.0f : 1.0f / l[r];
          for (std::int64_t c = 0; c < d; ++c) O[r * d + c] *= inv_l;
          S[r] = reference::SoftmaxState{m[r], l[r]}.LogSumExp();
        }
        O_k.Store((s * rows + hk * R) * d, R * d, O.data());
        lse_k.Store(s * rows + hk * R, R, S.data());
      }
    }
    // MergeRow: LSE = log Σ_k e^{LSE_k}, O = Σ_k e^{LSE_k − LSE} O_k
    for (std::int64_t row = 0; row < rows; ++row) {
      const std::int64_t hk = row / R, h = hk * G + row % R / Nq, i = row % Nq;
      const HeadProblem& head = heads[h];
      const MainMemoryArray O_k(head, O_partial.data(), sizeof(float));
      const MainMemoryArray lse_k(head, lse_partial.data(), sizeof(float));
      for (std::int64_t s = 0; s < splits; ++s) lse_k.Load(s * rows + row, 1, &lse[s]);
      const float max = *std::max_element(lse.begin(), lse.end());
      float sum = 0.0f;
      if (max != kNegInf) {
        for (std::int64_t s = 0; s < splits; ++s) sum += std::exp(lse[s] - max);
      }
      std::fill(o_row.begin(), o_row.end(), 0.0f);
      for (std::int64_t s = 0; s < splits; ++s) {
        if (lse[s] == kNegInf) continue;
        O_k.Load((s * rows + row) * d, d, O.data());
        const float weight = std::exp(lse[s] - max) / sum;
        for (std::int64_t c = 0; c < d; ++c) o_row[c] += weight * O[c];
      }
      const float row_lse = max == kNegInf ? max : max + std::log(sum);
      head.StoreO(i, 1, o_row.data());
      head.StoreLse(i, 1, &row_lse);
    }
    for (const HeadProblem& head : heads) total += head.io();
  }
  return total;
}

}  // namespace flashattn::io_model
