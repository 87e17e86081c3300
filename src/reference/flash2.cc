// flash2 (docs/algorithms.md): the FlashAttention-2 loop order. Each Q block is finished before the next starts, so
// its running state stays in fast memory and O is written once:
//   for i in 0..Tr (outer, Q blocks — the unit of parallel work): load Q_i;
//     Õ_i = 0, l_i = 0, m_i = −∞ (fast memory); with an attention sink s_h, l_i = 1, m_i = s_h: the row has
//     seen the sink, a logit without a value
//     for j in 0..Tc (inner, K/V blocks): load K_j, V_j
//       S_ij = Score(Q_i K_jᵀ)
//       m_new = max(m_i, rowmax(S_ij)),  P̃_ij = exp(S_ij − m_new)
//       l_i = e^{m_i − m_new} l_i + rowsum(P̃_ij)
//       Õ_i = diag(e^{m_i − m_new}) Õ_i + (P̃_ij ∘ Z_ij) V_j,  m_i = m_new   (Z: dropout multipliers, else 1)
//     O_i = diag(l_i)⁻¹ Õ_i,  LSE_i = m_i + log l_i;  write O_i, LSE_i
#include <algorithm>
#include <vector>

#include "common/dropout.h"
#include "reference/problem.h"
#include "reference/reference.h"
#include "reference/softmax.h"

namespace flashattn::reference {

namespace {

struct Scratch : Tiles {
  std::vector<float> lse_i;
};

void Flash2Head(const HeadProblem& problem, BlockSizes blocks, const Dropout& dropout, Scratch& x) {
  const std::int64_t Nq = problem.Nq, Nk = problem.Nk, d = problem.d, dv = problem.dv;
  const std::int64_t Br = blocks.Br, Bc = blocks.Bc;
  const std::int64_t Tr = (Nq + Br - 1) / Br, Tc = (Nk + Bc - 1) / Bc;

  for (std::int64_t i = 0; i < Tr; ++i) {
    const std::int64_t i0 = i * Br, rows = std::min(Br, Nq - i0);
    problem.LoadQ(i0, rows, x.Q_i.data());
    std::fill(x.O_i.begin(), x.O_i.end(), 0.0f);
    std::fill(x.l_i.begin(), x.l_i.end(), problem.Start().l);
    std::fill(x.m_i.begin(), x.m_i.end(), problem.Start().m);
    for (std::int64_t j = 0; j < Tc; ++j) {
      const std::int64_t j0 = j * Bc, cols = std::min(Bc, Nk - j0);
      problem.LoadK(j0, cols, x.K_j.data());
      problem.LoadV(j0, cols, x.V_j.data());
      for (std::int64_t r = 0; r < rows; ++r) {
        float* S_r = &x.S_ij[r * Bc];  // P̃_ij = exp(S_ij − m_new), m_new = max(m_i, rowmax(S_ij))
        const auto [m_new, row_sum] =
            ScoreRowOnline(problem, i0 + r, j0, cols, &x.Q_i[r * d], x.K_j.data(), x.m_i[r], S_r);
        const float rescale = RescaleFactor(x.m_i[r], m_new);  // e^{m_i − m_new}
        x.l_i[r] = rescale * x.l_i[r] + row_sum;
        dropout.RowMultipliers(problem.b, problem.h, i0 + r, j0, cols, x.Z_r.data());
        float* O_r = &x.O_i[r * dv];
        for (std::int64_t e = 0; e < dv; ++e) {
          float PV = 0.0f;
          for (std::int64_t c = 0; c < cols; ++c) {
            if (!problem.Sees(i0 + r, j0 + c)) continue;  // P̃ = 0, but 0·v_c is NaN for an inf or NaN v_c
            PV += S_r[c] * x.Z_r[c] * x.V_j[c * dv + e];
          }
          O_r[e] = rescale * O_r[e] + PV;
        }
        x.m_i[r] = m_new;
      }
    }
    for (std::int64_t r = 0; r < rows; ++r) {  // O_i = diag(l_i)⁻¹ Õ_i; a row with l = 0 saw no key
      const float inv_l = x.l_i[r] == 0.0f ? 0.0f : 1.0f / x.l_i[r];
      for (std::int64_t e = 0; e < dv; ++e) x.O_i[r * dv + e] *= inv_l;
      x.lse_i[r] = SoftmaxState{x.m_i[r], x.l_i[r]}.LogSumExp();
    }
    problem.StoreO(i0, rows, x.O_i.data());
    problem.StoreLse(i0, rows, x.lse_i.data());
  }
}

}  // namespace

void Flash2(const AttentionParams& params, IoCount* io) {
  const BlockSizes blocks = ClampBlockSizes(ChooseBlockSizes(params), params);
  const std::int64_t d = params.head_dim, dv = params.value_head_dim();
  const Scratch one{Tiles(blocks, d, dv), std::vector<float>(blocks.Br)};
  std::vector<Scratch> scratch(static_cast<std::size_t>(ResolveThreads(params.num_threads)), one);
  const Dropout dropout(params);
  ForEachHead(params, [&](const HeadProblem& problem, int thread) {
    Flash2Head(problem, blocks, dropout, scratch[thread]);
  }, io);
}

}  // namespace flashattn::reference
