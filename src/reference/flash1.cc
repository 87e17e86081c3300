// flash1 (docs/algorithms.md): Algorithm 1 of the FlashAttention paper, loop for loop.
//   Initialize O = (0)Nq×dv, l = (0)Nq, m = (−∞)Nq in main memory; with an attention sink s_h, l = (1)Nq and
//   m = (s_h)Nq: the sink is a logit every row has seen before its first key block (it has no value, so O = 0).
//   for j in 0..Tc (outer, K/V blocks): load K_j, V_j
//     for i in 0..Tr (inner, Q blocks): load Q_i, O_i, l_i, m_i
//       S_ij = Score(Q_i K_jᵀ)                                  (Br×Bc)
//       m̃_ij = rowmax(S_ij), P̃_ij = exp(S_ij − m̃_ij), l̃_ij = rowsum(P̃_ij)
//       m_new = max(m_i, m̃_ij), l_new = e^{m_i − m_new} l_i + e^{m̃_ij − m_new} l̃_ij
//       O_i ← diag(l_new)⁻¹ (diag(l_i) e^{m_i − m_new} O_i + e^{m̃_ij − m_new} (P̃_ij ∘ Z_ij) V_j)
//         (Z: the dropout multipliers, all 1 without dropout)
//       write O_i, l_i ← l_new, m_i ← m_new to main memory
//   LSE = m + log l, block by block (l and m read once more).
// O lives in the caller's output array (its element type) between K/V blocks, as the paper keeps O in
// HBM; l and m live in main-memory arrays of their own.
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/dropout.h"
#include "reference/problem.h"
#include "reference/reference.h"
#include "reference/softmax.h"

namespace flashattn::reference {

namespace {

struct Scratch : Tiles {     // fast memory: one tile each
  std::vector<float> l, m;  // main memory: Nq each
};

void Flash1Head(const HeadProblem& problem, BlockSizes blocks, const Dropout& dropout, Scratch& x) {
  const std::int64_t Nq = problem.Nq, Nk = problem.Nk, d = problem.d, dv = problem.dv;
  const std::int64_t Br = blocks.Br, Bc = blocks.Bc;
  const std::int64_t Tr = (Nq + Br - 1) / Br, Tc = (Nk + Bc - 1) / Bc;

  const MainMemoryArray l(problem, x.l.data(), sizeof(float));
  const MainMemoryArray m(problem, x.m.data(), sizeof(float));
  std::fill(x.O_i.begin(), x.O_i.end(), 0.0f);
  for (std::int64_t i = 0; i < Tr; ++i) problem.StoreO(i * Br, std::min(Br, Nq - i * Br), x.O_i.data());
  l.Fill(Nq, problem.Start().l);
  m.Fill(Nq, problem.Start().m);

  for (std::int64_t j = 0; j < Tc; ++j) {
    const std::int64_t j0 = j * Bc, cols = std::min(Bc, Nk - j0);
    problem.LoadK(j0, cols, x.K_j.data());
    problem.LoadV(j0, cols, x.V_j.data());
    for (std::int64_t i = 0; i < Tr; ++i) {
      const std::int64_t i0 = i * Br, rows = std::min(Br, Nq - i0);
      problem.LoadQ(i0, rows, x.Q_i.data());
      problem.LoadO(i0, rows, x.O_i.data());
      l.Load(i0, rows, x.l_i.data());
      m.Load(i0, rows, x.m_i.data());
      for (std::int64_t r = 0; r < rows; ++r) {
        float* S_r = &x.S_ij[r * Bc];
        float m_tilde = kNegInf;  // m̃_ij = rowmax(S_ij)
        for (std::int64_t c = 0; c < cols; ++c) {
          float q_dot_k = 0.0f;
          for (std::int64_t e = 0; e < d; ++e) q_dot_k += x.Q_i[r * d + e] * x.K_j[c * d + e];
          S_r[c] = problem.Score(i0 + r, j0 + c, q_dot_k);
          m_tilde = MaxKeepingNaN(m_tilde, S_r[c]);
        }
        float l_tilde = 0.0f;  // P̃_ij = exp(S_ij − m̃_ij) (kept in S_r), l̃_ij = rowsum(P̃_ij)
        for (std::int64_t c = 0; c < cols; ++c) {
          S_r[c] = RescaleFactor(S_r[c], m_tilde);
          l_tilde += S_r[c];
        }
        const float m_new = MaxKeepingNaN(x.m_i[r], m_tilde);
        const float old_scale = RescaleFactor(x.m_i[r], m_new);   // e^{m_i − m_new}
        const float block_scale = RescaleFactor(m_tilde, m_new);  // e^{m̃_ij − m_new}
        const float l_new = old_scale * x.l_i[r] + block_scale * l_tilde;
        float* O_r = &x.O_i[r * dv];
        dropout.RowMultipliers(problem.b, problem.h, i0 + r, j0, cols, x.Z_r.data());
        for (std::int64_t e = 0; e < dv; ++e) {
          float PV = 0.0f;  // ((P̃_ij ∘ Z_ij) V_j)_re over the keys the row sees
          for (std::int64_t c = 0; c < cols; ++c) {
            if (!problem.Sees(i0 + r, j0 + c)) continue;  // P̃ = 0, but 0·v_c is NaN for an inf or NaN v_c
            PV += S_r[c] * x.Z_r[c] * x.V_j[c * dv + e];
          }
          const float numerator = x.l_i[r] * old_scale * O_r[e] + block_scale * PV;
          // l_new = 0: no weight seen yet (m_new = −∞, both scales 0); the numerator is 0, or NaN from 0·v_c
          O_r[e] = l_new == 0.0f ? numerator : numerator / l_new;
        }
        x.l_i[r] = l_new;
        x.m_i[r] = m_new;
      }
      problem.StoreO(i0, rows, x.O_i.data());
      l.Store(i0, rows, x.l_i.data());
      m.Store(i0, rows, x.m_i.data());
    }
  }
  if (!problem.WantsLse()) return;
  for (std::int64_t i = 0; i < Tr; ++i) {  // LSE_i = m_i + log l_i, computed in l_i's fast memory
    const std::int64_t i0 = i * Br, rows = std::min(Br, Nq - i0);
    l.Load(i0, rows, x.l_i.data());
    m.Load(i0, rows, x.m_i.data());
    for (std::int64_t r = 0; r < rows; ++r) x.l_i[r] = SoftmaxState{x.m_i[r], x.l_i[r]}.LogSumExp();
    problem.StoreLse(i0, rows, x.l_i.data());
  }
}

}  // namespace

BlockSizes ChooseBlockSizes(const AttentionParams& params) {
  const std::int64_t d = params.head_dim;
  const std::int64_t M_bytes =
      params.tiling.fast_memory_bytes > 0 ? params.tiling.fast_memory_bytes : kDefaultFastMemoryBytes;
  const std::int64_t M = M_bytes / 4;  // fast memory in float32 elements
  const std::int64_t Bc = params.tiling.block_cols > 0 ? params.tiling.block_cols : (M + 4 * d - 1) / (4 * d);
  const std::int64_t Br = params.tiling.block_rows > 0 ? params.tiling.block_rows : std::min(Bc, d);
  return {Br, Bc};
}

BlockSizes ClampBlockSizes(BlockSizes blocks, const AttentionParams& params) {
  return {std::min(blocks.Br, std::max<std::int64_t>(1, params.seqlen_q)),
          std::min(blocks.Bc, std::max<std::int64_t>(1, params.seqlen_k))};
}

void Flash1(const AttentionParams& params, IoCount* io) {
  const BlockSizes blocks = ClampBlockSizes(ChooseBlockSizes(params), params);
  const std::int64_t d = params.head_dim, dv = params.value_head_dim(), Nq = params.seqlen_q;
  const Scratch one{Tiles(blocks, d, dv), std::vector<float>(Nq), std::vector<float>(Nq)};
  std::vector<Scratch> scratch(static_cast<std::size_t>(ResolveThreads(params.num_threads)), one);
  const Dropout dropout(params);
  ForEachHead(params, [&](const HeadProblem& problem, int thread) {
    Flash1Head(problem, blocks, dropout, scratch[thread]);
  }, io);
}

}  // namespace flashattn::reference
