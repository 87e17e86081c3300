// standard (docs/algorithms.md): three passes over main memory that materialize the Nq×Nk matrices S and P.
//   pass 1: S = s·Q Kᵀ with the masks and modifiers of score.h         (read Q, K; write S)
//   pass 2: P = softmax_row(S), LSE_r = m_r + log l_r, by the safe softmax (read S; write P); an attention
//           sink s_h is one more logit of every row's softmax, without a column of P
//   pass 3: O = (P ∘ Z) V, Z the dropout multipliers (all 1 without dropout)  (read P, V; write O)
// S and P are kept in the element type, as a framework's plain implementation would store them; for
// float16/bfloat16 this is the "same-precision standard" the kernels' error is compared with.
#include <algorithm>
#include <vector>

#include "common/element.h"
#include "common/dropout.h"
#include "reference/problem.h"
#include "reference/reference.h"
#include "reference/softmax.h"

namespace flashattn::reference {

namespace {

struct Scratch {
  std::vector<float> S, P;                 // main memory: Nq×Nk each
  std::vector<float> Q, K, V, O, lse, S_i, P_i, Z_i;  // fast memory (the seed's model keeps Q, K, V there)
};

// S and P are main-memory arrays: each is written once and read once, a row at a time.
void StandardHead(const HeadProblem& problem, DType dtype, const Dropout& dropout, Scratch& x) {
  const std::int64_t Nq = problem.Nq, Nk = problem.Nk, d = problem.d, dv = problem.dv;
  const MainMemoryArray S(problem, x.S.data(), problem.ElementBytes());
  const MainMemoryArray P(problem, x.P.data(), problem.ElementBytes());
  problem.LoadQ(0, Nq, x.Q.data());
  problem.LoadK(0, Nk, x.K.data());
  for (std::int64_t i = 0; i < Nq; ++i) {  // S_ij = Score(q_i · k_j)
    for (std::int64_t j = 0; j < Nk; ++j) {
      float q_dot_k = 0.0f;
      for (std::int64_t c = 0; c < d; ++c) q_dot_k += x.Q[i * d + c] * x.K[j * d + c];
      x.S_i[j] = RoundTo(dtype, problem.Score(i, j, q_dot_k));
    }
    S.Store(i * Nk, Nk, x.S_i.data());
  }
  for (std::int64_t i = 0; i < Nq; ++i) {  // P_i = softmax(S_i)
    S.Load(i * Nk, Nk, x.S_i.data());
    const SoftmaxState state = SoftmaxSafe(x.S_i, x.P_i, problem.Sink());
    x.lse[i] = state.LogSumExp();
    for (float& p : x.P_i) p = RoundTo(dtype, p);
    P.Store(i * Nk, Nk, x.P_i.data());
  }
  problem.LoadV(0, Nk, x.V.data());
  std::fill(x.O.begin(), x.O.end(), 0.0f);
  for (std::int64_t i = 0; i < Nq; ++i) {  // O_i = Σ_j P_ij Z_ij v_j over the keys j row i sees
    P.Load(i * Nk, Nk, x.P_i.data());
    dropout.RowMultipliers(problem.b, problem.h, i, 0, Nk, x.Z_i.data());
    for (std::int64_t j = 0; j < Nk; ++j) {
      if (!problem.Sees(i, j)) continue;  // P_ij = 0, but 0·v_j is NaN for an inf or NaN in v_j
      for (std::int64_t c = 0; c < dv; ++c) x.O[i * dv + c] += x.P_i[j] * x.Z_i[j] * x.V[j * dv + c];
    }
  }
  problem.StoreO(0, Nq, x.O.data());
  problem.StoreLse(0, Nq, x.lse.data());
}

}  // namespace

void Standard(const AttentionParams& params, IoCount* io) {
  const std::int64_t Nq = params.seqlen_q, Nk = params.seqlen_k;
  const std::int64_t d = params.head_dim, dv = params.value_head_dim();
  std::vector<Scratch> scratch(static_cast<std::size_t>(ResolveThreads(params.num_threads)));
  for (Scratch& x : scratch) {  // all memory up front: nothing is written if an allocation fails
    x.Q.resize(Nq * d);
    x.K.resize(Nk * d);
    x.V.resize(Nk * dv);
    x.S.resize(Nq * Nk);
    x.P.resize(Nq * Nk);
    x.O.resize(Nq * dv);
    x.lse.resize(Nq);
    x.S_i.resize(Nk);
    x.P_i.resize(Nk);
    x.Z_i.resize(Nk);
  }
  const Dropout dropout(params);
  ForEachHead(params, [&](const HeadProblem& problem, int thread) {
    StandardHead(problem, params.dtype, dropout, scratch[thread]);
  }, io);
}

}  // namespace flashattn::reference
