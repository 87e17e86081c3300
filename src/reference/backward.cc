// backward (docs/backward.md), two readable references of the same formulas, per (batch b, K/V head) so that the
// gradients of K and V can be summed over the query heads h of its group:
//   D_i   = dO_i · O_i                                   (rowsum(dO ∘ O))
//   P_ij  = exp(S_ij − LSE_i)                            (0 where S_ij = −∞, and on rows with LSE_i = −∞)
//   dV_j += Σ_i P_ij Z_ij dO_i                           (Z = dropout multiplier keep/(1 − p), 1 without)
//   dP_ij = Z_ij (dO_i · v_j)
//   dS_ij = P_ij (dP_ij − D_i) · cap'_ij                 (cap' = 1 − tanh²(s q_i·k_j / c), softcap c; else 1)
//   dQ_i  = s Σ_j dS_ij k_j,   dK_j += s Σ_i dS_ij q_i
//   dsink_h = −Σ_{b,i} e^{s_h − LSE_i} D_i               (attention sink s_h: P_i,sink = e^{s_h − LSE_i} has no value,
//                                                         so its dS is P_i,sink (0 − D_i))
// ALiBi and the mask tensor are constants added to S: they pass dS through unchanged and get no gradient. Only the
// pairs (i, j) where row i sees key j (band, boolean mask) and saw some key (LSE_i > −∞) take part; every other pair
// contributes nothing, not even 0·NaN, so a non-finite input reaches only the gradients of the pairs it touches
// (docs/robustness.md). An additive mask's −∞ is arithmetic: that pair takes part with P_ij = 0.
//   StandardBackward: float32 with P and dS materialized (Nq×Nk) and rounded to the element type, as a
//                     framework's plain implementation stores them: the baseline of the kernel's error.
//   OracleBackward:   float64 from Q, K, V and dO alone (O, LSE recomputed), the exact gradients of ⟨dO, O⟩.
#include "reference/backward.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <mutex>
#include <vector>

#include "common/element.h"
#include "common/dropout.h"
#include "common/score.h"
#include "reference/problem.h"
#include "reference/reference.h"

namespace flashattn::reference {

namespace {

// Element (b, row, head, c) of a (batch, seq, head, dim) tensor of the call's element type.
float LoadAt(const void* base, DType dtype, const Strides& s, std::int64_t b, std::int64_t row,
             std::int64_t h, std::int64_t c) {
  return LoadAsFloat(base, dtype, b * s.batch + row * s.seq + h * s.head + c);
}
void StoreAt(void* base, DType dtype, const Strides& s, std::int64_t b, std::int64_t row, std::int64_t h,
             std::int64_t c, float value) {
  StoreFromFloat(base, dtype, b * s.batch + row * s.seq + h * s.head + c, value);
}

// cap'_ij = d S_ij / d(s q·k): the derivative of c·tanh(x / c) at x = s q_i·k_j.
template <typename T>
T SoftcapDerivative(float softcap, T scaled_q_dot_k) {
  if (softcap <= 0.0f) return T{1};
  const T t = std::tanh(scaled_q_dot_k / static_cast<T>(softcap));
  return T{1} - t * t;
}

// Runs solve(b, hkv, thread) for every (batch, K/V head) in parallel; the first exception is rethrown.
template <typename Solve>
void ForEachKvHead(const AttentionParams& p, Solve&& solve) {
  std::exception_ptr failure;
  std::mutex failure_mutex;
#pragma omp parallel for schedule(dynamic, 1) num_threads(ResolveThreads(p.num_threads))
  for (std::int64_t index = 0; index < p.batch * p.heads_kv; ++index) {
    try {
      solve(index / p.heads_kv, index % p.heads_kv, omp_get_thread_num());
    } catch (...) {
      const std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

// dsinks[h] = Σ_b sums[b·Hq + h], over the batch in order.
template <typename T>
void WriteSinkGradients(const BackwardParams& bp, const std::vector<T>& sums) {
  const AttentionParams& p = bp.attention;
  if (bp.dsinks == nullptr) return;
  for (std::int64_t h = 0; h < p.heads_q; ++h) {
    T total = 0;
    for (std::int64_t b = 0; b < p.batch; ++b) total += sums[b * p.heads_q + h];
    bp.dsinks[h] = static_cast<float>(total);
  }
}

struct StandardScratch {
  std::vector<float> Q, K, V, O, dO, lse, D, Z_i;
  std::vector<float> P, dS;  // main memory: Nq×Nk each
  std::vector<float> dQ, dK, dV;
};

// Writes the gradients of (b, hkv) and, for each query head h of the group, its rows' share of dsink_h into
// sink_sums[b·Hq + h].
void StandardBackwardGroup(const BackwardParams& bp, std::int64_t b, std::int64_t hkv, StandardScratch& x,
                           float* sink_sums) {
  const AttentionParams& p = bp.attention;
  const DType dtype = p.dtype;
  const std::int64_t group = p.heads_q / p.heads_kv;
  const Dropout dropout(p);
  std::fill(x.dK.begin(), x.dK.end(), 0.0f);
  std::fill(x.dV.begin(), x.dV.end(), 0.0f);
  for (std::int64_t h = hkv * group; h < (hkv + 1) * group; ++h) {
    const HeadProblem problem(p, b, h);
    const std::int64_t Nq = problem.Nq, Nk = problem.Nk, d = problem.d, dv = problem.dv;
    const float s = problem.scale;
    problem.LoadQ(0, Nq, x.Q.data());
    problem.LoadK(0, Nk, x.K.data());
    problem.LoadV(0, Nk, x.V.data());
    problem.LoadO(0, Nq, x.O.data());
    for (std::int64_t i = 0; i < Nq; ++i) {
      for (std::int64_t c = 0; c < dv; ++c)
        x.dO[i * dv + c] = LoadAt(bp.d_o, dtype, bp.do_strides, b, i, h, c);
      x.lse[i] = p.lse[(b * p.heads_q + h) * Nq + i];
    }
    float& sink_sum = sink_sums[b * p.heads_q + h];
    sink_sum = 0.0f;
    for (std::int64_t i = 0; i < Nq; ++i) {  // D_i = dO_i · O_i, and dsink_h's term
      x.D[i] = 0.0f;
      for (std::int64_t c = 0; c < dv; ++c) x.D[i] += x.dO[i * dv + c] * x.O[i * dv + c];
      sink_sum += SinkGradientTerm(problem.Sink(), x.lse[i], x.D[i]);
    }
    const auto seen = [&](std::int64_t i, std::int64_t j) {  // pair (i, j) takes part
      return x.lse[i] != kNegInf && problem.Sees(i, j);
    };
    for (std::int64_t i = 0; i < Nq; ++i) {  // P_ij = exp(S_ij − LSE_i)
      for (std::int64_t j = 0; j < Nk; ++j) {
        x.P[i * Nk + j] = 0.0f;
        if (!seen(i, j)) continue;
        float q_dot_k = 0.0f;
        for (std::int64_t c = 0; c < d; ++c) q_dot_k += x.Q[i * d + c] * x.K[j * d + c];
        const float S_ij = problem.Score(i, j, q_dot_k);
        x.P[i * Nk + j] = RoundTo(dtype, std::exp(S_ij - x.lse[i]));
      }
    }
    for (std::int64_t i = 0; i < Nq; ++i) {  // dV_j += P_ij Z_ij dO_i
      dropout.RowMultipliers(b, h, i, 0, Nk, x.Z_i.data());
      for (std::int64_t j = 0; j < Nk; ++j) {
        if (!seen(i, j)) continue;
        for (std::int64_t c = 0; c < dv; ++c)
          x.dV[j * dv + c] += x.P[i * Nk + j] * x.Z_i[j] * x.dO[i * dv + c];
      }
    }
    for (std::int64_t i = 0; i < Nq; ++i) {  // dS_ij = P_ij (Z_ij dO_i·v_j − D_i) cap'_ij
      dropout.RowMultipliers(b, h, i, 0, Nk, x.Z_i.data());
      for (std::int64_t j = 0; j < Nk; ++j) {
        x.dS[i * Nk + j] = 0.0f;
        if (!seen(i, j)) continue;
        float dO_dot_v = 0.0f, q_dot_k = 0.0f;
        for (std::int64_t c = 0; c < dv; ++c) dO_dot_v += x.dO[i * dv + c] * x.V[j * dv + c];
        for (std::int64_t c = 0; c < d; ++c) q_dot_k += x.Q[i * d + c] * x.K[j * d + c];
        const float dP_ij = x.Z_i[j] * dO_dot_v;
        x.dS[i * Nk + j] =
            RoundTo(dtype, x.P[i * Nk + j] * (dP_ij - x.D[i]) * SoftcapDerivative(p.softcap, s * q_dot_k));
      }
    }
    std::fill(x.dQ.begin(), x.dQ.end(), 0.0f);
    for (std::int64_t i = 0; i < Nq; ++i) {  // dQ_i = s Σ_j dS_ij k_j,  dK_j += s Σ_i dS_ij q_i
      for (std::int64_t j = 0; j < Nk; ++j) {
        if (!seen(i, j)) continue;
        const float g = s * x.dS[i * Nk + j];
        for (std::int64_t c = 0; c < d; ++c) x.dQ[i * d + c] += g * x.K[j * d + c];
        for (std::int64_t c = 0; c < d; ++c) x.dK[j * d + c] += g * x.Q[i * d + c];
      }
    }
    for (std::int64_t i = 0; i < Nq; ++i)
      for (std::int64_t c = 0; c < d; ++c) StoreAt(bp.dq, dtype, bp.dq_strides, b, i, h, c, x.dQ[i * d + c]);
  }
  const std::int64_t Nk = p.seqlen_k, d = p.head_dim, dv = p.value_head_dim();
  for (std::int64_t j = 0; j < Nk; ++j) {
    for (std::int64_t c = 0; c < d; ++c) StoreAt(bp.dk, dtype, bp.dk_strides, b, j, hkv, c, x.dK[j * d + c]);
    for (std::int64_t c = 0; c < dv; ++c)
      StoreAt(bp.dv, dtype, bp.dv_strides, b, j, hkv, c, x.dV[j * dv + c]);
  }
}

}  // namespace

void StandardBackward(const BackwardParams& bp) {
  const AttentionParams& p = bp.attention;
  const std::int64_t Nq = p.seqlen_q, Nk = p.seqlen_k, d = p.head_dim, dv = p.value_head_dim();
  std::vector<StandardScratch> scratch(static_cast<std::size_t>(ResolveThreads(p.num_threads)));
  for (StandardScratch& x : scratch) {  // all memory up front: nothing is written if an allocation fails
    x.Q.resize(Nq * d), x.K.resize(Nk * d), x.V.resize(Nk * dv), x.O.resize(Nq * dv), x.dO.resize(Nq * dv);
    x.lse.resize(Nq), x.D.resize(Nq), x.Z_i.resize(Nk);
    x.P.resize(Nq * Nk), x.dS.resize(Nq * Nk);
    x.dQ.resize(Nq * d), x.dK.resize(Nk * d), x.dV.resize(Nk * dv);
  }
  std::vector<float> sink_sums(static_cast<std::size_t>(p.batch * p.heads_q));
  ForEachKvHead(p, [&](std::int64_t b, std::int64_t hkv, int thread) {
    StandardBackwardGroup(bp, b, hkv, scratch[thread], sink_sums.data());
  });
  WriteSinkGradients(bp, sink_sums);
}

OracleGradients OracleBackwardGroup(const BackwardParams& bp, std::int64_t b, std::int64_t hkv) {
  const AttentionParams& p = bp.attention;
  const std::int64_t group = p.heads_q / p.heads_kv;
  const std::int64_t Nq = p.seqlen_q, Nk = p.seqlen_k, d = p.head_dim, dv = p.value_head_dim();
  const Dropout dropout(p);
  const double inf = std::numeric_limits<double>::infinity();
  OracleGradients g;
  g.dQ.assign(group * Nq * d, 0.0);
  g.dK.assign(Nk * d, 0.0);
  g.dV.assign(Nk * dv, 0.0);
  g.dsinks.assign(group, 0.0);
  std::vector<double> Q(Nq * d), K(Nk * d), V(Nk * dv), dO_i(dv), O_i(dv), S_i(Nk), Z_i(Nk);
  std::vector<float> Z_f(Nk);
  for (std::int64_t h = hkv * group; h < (hkv + 1) * group; ++h) {
    const HeadProblem problem(p, b, h);
    const double s = problem.scale, sink = problem.Sink();
    double* dQ = g.dQ.data() + (h - hkv * group) * Nq * d;  // g.dQ is empty without query rows
    problem.LoadQ(0, Nq, Q.data());
    problem.LoadK(0, Nk, K.data());
    problem.LoadV(0, Nk, V.data());
    for (std::int64_t i = 0; i < Nq; ++i) {
      for (std::int64_t c = 0; c < dv; ++c) dO_i[c] = LoadAt(bp.d_o, p.dtype, bp.do_strides, b, i, h, c);
      dropout.RowMultipliers(b, h, i, 0, Nk, Z_f.data());
      std::copy(Z_f.begin(), Z_f.end(), Z_i.begin());
      double m = sink;  // LSE_i = log(Σ_j e^{S_ij} + e^{s_h}), by the safe softmax; a NaN score makes it NaN
      for (std::int64_t j = 0; j < Nk; ++j) {
        double q_dot_k = 0.0;
        for (std::int64_t c = 0; c < d; ++c) q_dot_k += Q[i * d + c] * K[j * d + c];
        S_i[j] = problem.Score(i, j, q_dot_k);
        m = std::isnan(S_i[j]) ? S_i[j] : std::max(m, S_i[j]);
      }
      if (m == -inf) continue;  // no visible key and no sink: O_i = 0 and every P_ij = 0, no gradient flows
      double l = 0.0;
      for (std::int64_t j = 0; j < Nk; ++j) l += std::exp(S_i[j] - m);
      if (sink != -inf) l += std::exp(sink - m);
      const double lse = m + std::log(l);
      std::fill(O_i.begin(), O_i.end(), 0.0);  // O_i = Σ_j P_ij Z_ij v_j over the keys row i sees
      for (std::int64_t j = 0; j < Nk; ++j) {
        if (!problem.Sees(i, j)) continue;
        const double P_ij = std::exp(S_i[j] - lse);
        for (std::int64_t c = 0; c < dv; ++c) O_i[c] += P_ij * Z_i[j] * V[j * dv + c];
      }
      double D = 0.0;  // D_i = dO_i · O_i
      for (std::int64_t c = 0; c < dv; ++c) D += dO_i[c] * O_i[c];
      g.dsinks[h - hkv * group] += SinkGradientTerm(problem.Sink(), lse, D);
      for (std::int64_t j = 0; j < Nk; ++j) {
        if (!problem.Sees(i, j)) continue;
        const double P_ij = std::exp(S_i[j] - lse);
        double dO_dot_v = 0.0, q_dot_k = 0.0;
        for (std::int64_t c = 0; c < dv; ++c) g.dV[j * dv + c] += P_ij * Z_i[j] * dO_i[c];
        for (std::int64_t c = 0; c < dv; ++c) dO_dot_v += dO_i[c] * V[j * dv + c];
        for (std::int64_t c = 0; c < d; ++c) q_dot_k += Q[i * d + c] * K[j * d + c];
        const double dS_ij = P_ij * (Z_i[j] * dO_dot_v - D) * SoftcapDerivative(p.softcap, s * q_dot_k);
        for (std::int64_t c = 0; c < d; ++c) dQ[i * d + c] += s * dS_ij * K[j * d + c];
        for (std::int64_t c = 0; c < d; ++c) g.dK[j * d + c] += s * dS_ij * Q[i * d + c];
      }
    }
  }
  return g;
}

void OracleBackward(const BackwardParams& bp) {
  const AttentionParams& p = bp.attention;
  // Compute everything first, then write: the gradients are touched only once all memory was obtained.
  std::vector<OracleGradients> groups(p.batch * p.heads_kv);
  ForEachKvHead(p, [&](std::int64_t b, std::int64_t hkv, int) {
    groups[b * p.heads_kv + hkv] = OracleBackwardGroup(bp, b, hkv);
  });
  const std::int64_t group = p.heads_q / p.heads_kv;
  const std::int64_t Nq = p.seqlen_q, Nk = p.seqlen_k, d = p.head_dim, dv = p.value_head_dim();
  std::vector<double> sink_sums(static_cast<std::size_t>(p.batch * p.heads_q));
  for (std::int64_t b = 0; b < p.batch; ++b) {
    for (std::int64_t hkv = 0; hkv < p.heads_kv; ++hkv) {
      const OracleGradients& g = groups[b * p.heads_kv + hkv];
      std::copy(g.dsinks.begin(), g.dsinks.end(), sink_sums.begin() + b * p.heads_q + hkv * group);
      for (std::int64_t hg = 0; hg < group; ++hg)
        for (std::int64_t i = 0; i < Nq; ++i)
          for (std::int64_t c = 0; c < d; ++c)
            StoreAt(bp.dq, p.dtype, bp.dq_strides, b, i, hkv * group + hg, c,
                    static_cast<float>(g.dQ[(hg * Nq + i) * d + c]));
      for (std::int64_t j = 0; j < Nk; ++j) {
        for (std::int64_t c = 0; c < d; ++c)
          StoreAt(bp.dk, p.dtype, bp.dk_strides, b, j, hkv, c, static_cast<float>(g.dK[j * d + c]));
        for (std::int64_t c = 0; c < dv; ++c)
          StoreAt(bp.dv, p.dtype, bp.dv_strides, b, j, hkv, c, static_cast<float>(g.dV[j * dv + c]));
      }
    }
  }
  WriteSinkGradients(bp, sink_sums);
}

double OracleLoss(const BackwardParams& bp) {
  const AttentionParams& p = bp.attention;
  double loss = 0.0;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    for (std::int64_t h = 0; h < p.heads_q; ++h) {
      const OracleRows rows = OracleHeadRows(p, b, h, 0, p.seqlen_q);
      for (std::int64_t i = 0; i < p.seqlen_q; ++i)
        for (std::int64_t c = 0; c < p.value_head_dim(); ++c)
          loss += LoadAt(bp.d_o, p.dtype, bp.do_strides, b, i, h, c) * rows.o[i * p.value_head_dim() + c];
    }
  }
  return loss;
}

}  // namespace flashattn::reference
