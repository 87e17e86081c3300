#include "oracle_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <vector>

#include "common/element.h"
#include "reference/problem.h"
#include "reference/reference.h"

namespace flashattn::fuzz {

void Fail(const std::string& what) {
  std::fprintf(stderr, "fuzz check failed: %s\n", what.c_str());
  std::abort();
}

namespace {

double UnitRoundoff(DType dtype) {
  switch (dtype) {
    case DType::kF16: return 0x1p-11;
    case DType::kBF16: return 0x1p-8;
    default: return 0x1p-24;
  }
}

}  // namespace

std::string CheckAgainstOracle(const AttentionParams& p, const Rounding& rounding) {
  constexpr double u = 0x1p-24;
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  const double u_out = UnitRoundoff(rounding.output), u_S = rounding.stored_scores;
  const double q_error = rounding.q_error;
  const float* q_bound = rounding.q_bound;
  const double keep = 1.0 - p.dropout_p;
  const Strides& os = p.o_strides;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    for (std::int64_t h = 0; h < p.heads_q; ++h) {
      const reference::HeadProblem problem(p, b, h);
      const std::int64_t Nq = problem.Nq, Nk = problem.Nk, d = problem.d, dv = problem.dv;
      const reference::OracleRows ref = reference::OracleHeadRows(p, b, h, 0, Nq);
      std::vector<double> Q(Nq * d), K(Nk * d), V(Nk * dv);
      problem.LoadQ(0, Nq, Q.data());
      problem.LoadK(0, Nk, K.data());
      problem.LoadV(0, Nk, V.data());
      std::vector<double> Q_bound(Nq * d, 0.0);
      if (q_bound != nullptr) {
        AttentionParams bound_params = p;
        bound_params.q = q_bound;
        reference::HeadProblem(bound_params, b, h).LoadQ(0, Nq, Q_bound.data());
      }
      for (std::int64_t i = 0; i < Nq; ++i) {
        double A = 0.0, A_q = 0.0, M = 0.0, V_max = 0.0, W_max = 0.0;  // W_max: what the weights' rounding scales
        std::int64_t visible = 0;
        for (std::int64_t j = 0; j < Nk; ++j) {
          double q_dot_k = 0.0, abs_dot = 0.0, bound_dot = 0.0;
          for (std::int64_t c = 0; c < d; ++c) {
            q_dot_k += Q[i * d + c] * K[j * d + c];
            abs_dot += std::fabs(Q[i * d + c] * K[j * d + c]);
            bound_dot += Q_bound[i * d + c] * std::fabs(K[j * d + c]);
          }
          const double S_ij = problem.Score(i, j, q_dot_k);
          if (S_ij == kNegInf) continue;
          A = std::max(A, std::fabs(problem.scale) * abs_dot);
          A_q = std::max(A_q, std::fabs(problem.scale) * bound_dot);
          M = std::max(M, std::fabs(S_ij));
          ++visible;
          for (std::int64_t c = 0; c < dv; ++c) V_max = std::max(V_max, std::fabs(V[j * dv + c]));
          if (rounding.weights_over_key_rows) {
            for (std::int64_t c = 0; c < d; ++c) W_max = std::max(W_max, std::fabs(K[j * d + c]));
          }
        }
        std::ostringstream where;
        where << "(b=" << b << ", h=" << h << ", i=" << i << ")";
        const double lse = p.lse ? p.lse[(b * p.heads_q + h) * Nq + i] : 0.0;
        auto O = [&](std::int64_t c) {
          return static_cast<double>(LoadAsFloat(p.o, p.dtype, b * os.batch + i * os.seq + h * os.head + c));
        };
        if (ref.lse[i] == kNegInf) {  // no visible key: zeros and −inf, exactly
          for (std::int64_t c = 0; c < dv; ++c) {
            if (O(c) != 0.0) return "row " + where.str() + " sees no key but O[" + std::to_string(c) +
                                    "] = " + std::to_string(O(c));
          }
          if (p.lse && lse != kNegInf) return "row " + where.str() + " sees no key but LSE = " + std::to_string(lse);
          continue;
        }
        const double dS = u * ((d + 4) * A + 16 * (M + 1) + 4 * p.softcap) + u_S * (M + 1) + q_error * A_q;
        const bool bounded = dS <= 0.25;
        const double o_tolerance =
            2 * (2 * dS + (Nk + 16) * u + 2 * rounding.output_roundings * u_out) * V_max / keep +
            static_cast<double>(visible) * rounding.weight_error * std::max(V_max, W_max) / keep;
        const double lse_tolerance = 2 * (dS + (Nk + 16) * u) + 4 * u * std::fabs(ref.lse[i]);
        for (std::int64_t c = 0; c < dv; ++c) {
          const double error = std::fabs(O(c) - ref.o[i * dv + c]);
          if (!std::isfinite(O(c)) || (bounded && !(error <= o_tolerance))) {
            std::ostringstream message;
            message << "O" << where.str() << "[" << c << "] = " << O(c) << ", oracle " << ref.o[i * dv + c]
                    << ": error " << error << " > bound " << o_tolerance << " (A=" << A << " M=" << M
                    << " V_max=" << V_max << " dS=" << dS << ")";
            return message.str();
          }
        }
        if (p.lse && (!std::isfinite(lse) || (bounded && !(std::fabs(lse - ref.lse[i]) <= lse_tolerance)))) {
          std::ostringstream message;
          message << "LSE" << where.str() << " = " << lse << ", oracle " << ref.lse[i] << ": bound "
                  << lse_tolerance << " (dS=" << dS << ")";
          return message.str();
        }
      }
    }
  }
  return "";
}

}  // namespace flashattn::fuzz
