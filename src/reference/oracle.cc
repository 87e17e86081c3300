// The float64 oracle: standard attention with every input converted exactly to double, so that its own
// rounding error (~1e-16) is negligible against float32 kernels. It defines what "correct" means.
//   S_ij = Score(q_i · k_j),  LSE_i = log(Σ_j e^{S_ij} + e^{s_h}),  O_i = Σ_j e^{S_ij − LSE_i} Z_ij v_j
// (s_h: the attention sink of the head, −∞ without one: a logit of the softmax without a value)
// (Z: the dropout multipliers of common/dropout.h, all 1 without dropout; j over the keys row i sees)
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/dropout.h"
#include "reference/problem.h"
#include "reference/reference.h"
#include "reference/softmax.h"

namespace flashattn::reference {

namespace {

// One query row: fills o (dv values) and returns LSE_i. Keys the row does not see (Sees) take no part, not
// even as 0·v_j, which is NaN for an inf or NaN in v_j; the keys it sees follow IEEE arithmetic.
double OracleRow(const HeadProblem& problem, const Dropout& dropout, std::int64_t i,
                 const std::vector<double>& q_i, const std::vector<double>& K, const std::vector<double>& V,
                 std::vector<double>& S_i, double* o) {
  const std::int64_t Nk = problem.Nk, d = problem.d, dv = problem.dv;
  const double neg_inf = -std::numeric_limits<double>::infinity();
  const double sink = problem.Sink();
  double m = sink;  // max(s_h, max_j S_ij) over the seen keys (unseen ones score −∞); NaN if some S_ij is
  for (std::int64_t j = 0; j < Nk; ++j) {
    double q_dot_k = 0.0;
    for (std::int64_t c = 0; c < d; ++c) q_dot_k += q_i[c] * K[j * d + c];
    S_i[j] = problem.Score(i, j, q_dot_k);
    m = MaxKeepingNaN(m, S_i[j]);
  }
  // m = −∞: no key seen, or every seen score −∞ (additive mask), and no sink. No weight to normalize: P_ij = 0,
  // LSE = −∞.
  const bool weighted = m != neg_inf;
  double l = 0.0;
  if (weighted) {
    for (std::int64_t j = 0; j < Nk; ++j) l += std::exp(S_i[j] - m);
    if (sink != neg_inf) l += std::exp(sink - m);
  }
  std::fill(o, o + dv, 0.0);
  for (std::int64_t j = 0; j < Nk; ++j) {
    if (!problem.Sees(i, j)) continue;
    const double P_ij = weighted ? std::exp(S_i[j] - m) / l : 0.0;
    const double Z_ij = dropout.Multiplier(problem.b, problem.h, i, j);
    for (std::int64_t c = 0; c < dv; ++c) o[c] += P_ij * Z_ij * V[j * dv + c];
  }
  return weighted ? m + std::log(l) : neg_inf;
}

}  // namespace

OracleRows OracleHeadRows(const AttentionParams& params, std::int64_t b, std::int64_t h,
                          std::int64_t row_begin, std::int64_t row_end) {
  const HeadProblem problem(params, b, h);
  std::vector<double> K(problem.Nk * problem.d), V(problem.Nk * problem.dv), q_i(problem.d);
  std::vector<double> S_i(problem.Nk);
  problem.LoadK(0, problem.Nk, K.data());
  problem.LoadV(0, problem.Nk, V.data());
  const Dropout dropout(params);
  OracleRows rows;
  rows.o.resize((row_end - row_begin) * problem.dv);
  rows.lse.resize(row_end - row_begin);
  for (std::int64_t i = row_begin; i < row_end; ++i) {
    problem.LoadQ(i, 1, q_i.data());
    rows.lse[i - row_begin] =
        OracleRow(problem, dropout, i, q_i, K, V, S_i, &rows.o[(i - row_begin) * problem.dv]);
  }
  return rows;
}

void Oracle(const AttentionParams& params) {
  // Compute everything first, then write: the outputs are touched only once all memory was obtained.
  std::vector<OracleRows> heads(params.batch * params.heads_q);
  ForEachHead(params, [&](const HeadProblem& problem, int) {
    heads[problem.b * params.heads_q + problem.h] =
        OracleHeadRows(params, problem.b, problem.h, 0, problem.Nq);
  });
  const std::int64_t problems = params.batch * params.heads_q;
  for (std::int64_t index = 0; index < problems; ++index) {
    const HeadProblem problem(params, index / params.heads_q, index % params.heads_q);
    problem.StoreO(0, problem.Nq, heads[index].o.data());
    std::vector<float> lse(heads[index].lse.begin(), heads[index].lse.end());
    problem.StoreLse(0, problem.Nq, lse.data());
  }
}

}  // namespace flashattn::reference
