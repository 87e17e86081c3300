#include "reference/problem.h"

#include <algorithm>

#include "reference/softmax.h"

namespace flashattn::reference {

int ResolveThreads(int requested) { return requested > 0 ? requested : omp_get_max_threads(); }

OnlineRowStep ScoreRowOnline(const HeadProblem& problem, std::int64_t i, std::int64_t j0, std::int64_t cols,
                             const float* q_r, const float* K_j, float m, float* S_r) {
  const std::int64_t d = problem.d;
  OnlineRowStep step{m, 0.0f};
  for (std::int64_t c = 0; c < cols; ++c) {
    float q_dot_k = 0.0f;
    for (std::int64_t e = 0; e < d; ++e) q_dot_k += q_r[e] * K_j[c * d + e];
    S_r[c] = problem.Score(i, j0 + c, q_dot_k);
    step.m_new = MaxKeepingNaN(step.m_new, S_r[c]);
  }
  for (std::int64_t c = 0; c < cols; ++c) {
    S_r[c] = RescaleFactor(S_r[c], step.m_new);
    step.row_sum += S_r[c];
  }
  return step;
}

HeadProblem::HeadProblem(const AttentionParams& p, std::int64_t b_index, std::int64_t h_index)
    : b(b_index),
      h(h_index),
      Nq(p.seqlen_q),
      Nk(p.seqlen_k),
      d(p.head_dim),
      dv(p.value_head_dim()),
      scale(SoftmaxScale(p)),
      dtype_(p.dtype),
      lse_(p.lse == nullptr ? nullptr : p.lse + (b * p.heads_q + h) * p.seqlen_q),
      q_row_stride_(p.q_strides.seq),
      k_row_stride_(p.k_strides.seq),
      v_row_stride_(p.v_strides.seq),
      o_row_stride_(p.o_strides.seq),
      mods_(p, b_index, h_index) {
  const std::int64_t elem = static_cast<std::int64_t>(size_of(p.dtype));
  const std::int64_t h_kv = h / (p.heads_q / p.heads_kv);
  // An empty tensor may be null, and an offset from null is undefined behaviour: it stays null.
  auto at = [elem](const void* base, const Strides& s, std::int64_t bb, std::int64_t hh) -> const char* {
    if (base == nullptr) return nullptr;
    return static_cast<const char*>(base) + (bb * s.batch + hh * s.head) * elem;
  };
  q_ = at(p.q, p.q_strides, b, h);
  k_ = at(p.k, p.k_strides, b, h_kv);
  v_ = at(p.v, p.v_strides, b, h_kv);
  o_ = const_cast<char*>(at(p.o, p.o_strides, b, h));
}

void HeadProblem::LoadO(std::int64_t row, std::int64_t n, float* dst) const {
  LoadRows(o_, o_row_stride_, dv, row, n, dst);
}

void HeadProblem::StoreLse(std::int64_t row, std::int64_t n, const float* src) const {
  if (lse_ == nullptr) return;
  std::copy(src, src + n, lse_ + row);
  CountWrite(n, sizeof(float));
}

}  // namespace flashattn::reference
