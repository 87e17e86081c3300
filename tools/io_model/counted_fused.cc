// The fused kernel's loops (src/forward/forward-inl.h), counted: FlashAttention-2 with the kernel's
// geometry (FusedGeometryOf) and its main-memory arrays, in plain scalar code through the counting accessors
// of src/reference/problem.h. What the kernel keeps in main memory is counted here as such:
//   for each (batch b, K/V head hk):
//     K_packed[j] ← K_j with zero rows up to Bc_pad        (read K_j: cols·d; write Bc_pad·d; packed
//                                                          elements of g.packed_element_bytes)
//     if packs_v: V_packed[j] ← V_j with zero columns up to dv_pad (read V_j: cols·dv; write cols·dv_pad)
//     for each query head h of the group, each Q block i:
//       load Q_i;  Õ = 0, l = 0, m = −∞
//       for each K/V block j in the band of rows i (KeysOfRows, as the kernel skips the others):
//         load K_packed[j] up to whole panels (RoundUp(cols, NR)·d), and V_j: V_packed[j] (cols·dv_pad)
//           or the caller's rows (cols·dv)
//         S_ij = Score(Q_i K_jᵀ); m_new = max(m, rowmax S_ij); P̃_ij = e^{S_ij − m_new}
//         l = e^{m − m_new} l + rowsum P̃_ij;  Õ = diag(e^{m − m_new}) Õ + (P̃_ij ∘ Z_ij) V_j
//       O_i = Õ / l, LSE_i = m + log l;  store O_i, LSE_i
// The panel layout of packed K does not change what moves, so K_packed here is row-major.
#include <omp.h>

#include <algorithm>
#include <exception>
#include <mutex>
#include <vector>

#include "io_model/counted.h"
#include "io_model/io_model.h"
#include "common/constants.h"
#include "common/dropout.h"
#include "common/score.h"
#include "reference/problem.h"
#include "reference/softmax.h"

namespace flashattn::io_model {

namespace {

using reference::HeadProblem;
using reference::MainMemoryArray;

// Fast memory of one (batch, K/V head) and the main-memory packed K and V of that head.
struct Scratch {
  std::vector<float> K_packed, V_packed;                  // main memory
  std::vector<float> Q_i, K_j, V_j, O_i, S_ij, l, m, lse, Z;  // fast memory
};

// Rows [i0, i0 + rows) of `problem`: the kernel's SolveQBlock.
void SolveQBlock(const HeadProblem& problem, const FusedGeometry& g, const Dropout& dropout,
                 const MainMemoryArray& K_packed, const MainMemoryArray& V_packed,
                 const ScoreModifiers& mods, std::int64_t i0, std::int64_t rows, Scratch& x) {
  const std::int64_t Nk = problem.Nk, d = problem.d, dv = problem.dv;
  problem.LoadQ(i0, rows, x.Q_i.data());
  std::fill(x.O_i.begin(), x.O_i.end(), 0.0f);
  std::fill(x.l.begin(), x.l.end(), 0.0f);
  std::fill(x.m.begin(), x.m.end(), kNegInf);
  const IndexRange reach = mods.KeysOfRows(i0, i0 + rows, Nk);
  for (std::int64_t jt = reach.begin / g.Bc; reach.begin < reach.end && jt * g.Bc < reach.end; ++jt) {
    const std::int64_t j0 = jt * g.Bc, cols = std::min(g.Bc, Nk - j0);
    K_packed.Load(jt * g.Bc_pad * d, RoundUp(cols, g.NR) * d, x.K_j.data());
    std::int64_t ldv = dv;  // V_j's row stride in fast memory
    if (g.packs_v) {
      V_packed.Load(jt * g.Bc * g.dv_pad, cols * g.dv_pad, x.V_j.data());
      ldv = g.dv_pad;
    } else {
      problem.LoadV(j0, cols, x.V_j.data());
    }
    for (std::int64_t r = 0; r < rows; ++r) {
      float* S_r = &x.S_ij[r * g.Bc];
      const auto [m_new, row_sum] =
          reference::ScoreRowOnline(problem, i0 + r, j0, cols, &x.Q_i[r * d], x.K_j.data(), x.m[r], S_r);
      const float rescale = reference::RescaleFactor(x.m[r], m_new);
      x.l[r] = rescale * x.l[r] + row_sum;
      dropout.RowMultipliers(problem.b, problem.h, i0 + r, j0, cols, x.Z.data());
      float* O_r = &x.O_i[r * dv];
      for (std::int64_t e = 0; e < dv; ++e) {
        float PV = 0.0f;
        for (std::int64_t c = 0; c < cols; ++c) PV += S_r[c] * x.Z[c] * x.V_j[c * ldv + e];
        O_r[e] = rescale * O_r[e] + PV;
      }
      x.m[r] = m_new;
    }
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    const float inv_l = x.l[r] == 0.0f ? 0.0f : 1.0f / x.l[r];
    for (std::int64_t e = 0; e < dv; ++e) x.O_i[r * dv + e] *= inv_l;
    x.lse[r] = reference::SoftmaxState{x.m[r], x.l[r]}.LogSumExp();
  }
  problem.StoreO(i0, rows, x.O_i.data());
  problem.StoreLse(i0, rows, x.lse.data());
}

// One (batch b, K/V head hk): pack, then every Q block of every query head of its group. Returns the
// traffic of all of it.
reference::IoCount SolveKvHead(const AttentionParams& params, const FusedGeometry& g, const Dropout& dropout,
                    std::int64_t b, std::int64_t hk, Scratch& x) {
  const std::int64_t group = params.heads_q / params.heads_kv;
  const std::int64_t Nq = params.seqlen_q, Nk = params.seqlen_k, d = params.head_dim, dv = params.value_head_dim();
  reference::IoCount io;
  // The packing is charged to the group's first query head, whose problem addresses this K/V head.
  const HeadProblem packer(params, b, hk * group);
  const MainMemoryArray K_packed(packer, x.K_packed.data(), g.packed_element_bytes);
  const MainMemoryArray V_packed(packer, x.V_packed.data(), g.packed_element_bytes);
  for (std::int64_t jt = 0; jt < g.Tc; ++jt) {
    const std::int64_t j0 = jt * g.Bc, cols = std::min(g.Bc, Nk - j0);
    std::fill(x.K_j.begin(), x.K_j.end(), 0.0f);
    packer.LoadK(j0, cols, x.K_j.data());
    K_packed.Store(jt * g.Bc_pad * d, g.Bc_pad * d, x.K_j.data());
    if (!g.packs_v) continue;
    packer.LoadV(j0, cols, x.V_j.data());
    float* V_j = x.V_j.data();
    for (std::int64_t c = cols - 1; c >= 0; --c) {  // rows of dv to rows of dv_pad, in place, zero-padded
      std::copy_backward(V_j + c * dv, V_j + c * dv + dv, V_j + c * g.dv_pad + dv);
      std::fill(V_j + c * g.dv_pad + dv, V_j + (c + 1) * g.dv_pad, 0.0f);
    }
    V_packed.Store(jt * g.Bc * g.dv_pad, cols * g.dv_pad, x.V_j.data());
  }
  io += packer.io();
  for (std::int64_t h = hk * group; h < (hk + 1) * group; ++h) {
    const HeadProblem problem(params, b, h);
    const MainMemoryArray K_read(problem, x.K_packed.data(), g.packed_element_bytes);
    const MainMemoryArray V_read(problem, x.V_packed.data(), g.packed_element_bytes);
    const ScoreModifiers mods(params, b, h);
    for (std::int64_t i0 = 0; i0 < Nq; i0 += g.Br) {
      SolveQBlock(problem, g, dropout, K_read, V_read, mods, i0, std::min(g.Br, Nq - i0), x);
    }
    io += problem.io();
  }
  return io;
}

}  // namespace

reference::IoCount CountFused(const AttentionParams& params) {
  reference::IoCount total;
  if (params.batch == 0 || params.seqlen_q == 0) return total;  // the kernel returns before packing
  const FusedGeometry g = FusedGeometryOf(params);
  const std::int64_t d = params.head_dim, dv = params.value_head_dim();
  const std::int64_t pairs = params.batch * params.heads_kv;
  const int threads =
      static_cast<int>(std::min<std::int64_t>(pairs, reference::ResolveThreads(params.num_threads)));
  std::vector<Scratch> scratch(static_cast<std::size_t>(threads));
  for (Scratch& x : scratch) {  // all memory first: nothing is written if an allocation fails
    x.K_packed.resize(g.Tc * g.Bc_pad * d);
    x.V_packed.resize(g.packs_v ? g.Tc * g.Bc * g.dv_pad : 0);
    x.Q_i.resize(g.Br * d);
    x.K_j.resize(g.Bc_pad * d);
    x.V_j.resize(g.Bc * std::max(dv, g.dv_pad));
    x.O_i.resize(g.Br * dv);
    x.S_ij.resize(g.Br * g.Bc);
    x.l.resize(g.Br);
    x.m.resize(g.Br);
    x.lse.resize(g.Br);
    x.Z.resize(g.Bc);
  }
  const Dropout dropout(params);
  std::exception_ptr failure;  // an exception may not leave the OpenMP region
  std::mutex mutex;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (std::int64_t pair = 0; pair < pairs; ++pair) {
    try {
      const reference::IoCount io = SolveKvHead(params, g, dropout, pair / params.heads_kv, pair % params.heads_kv,
                                     scratch[omp_get_thread_num()]);
      const std::lock_guard<std::mutex> lock(mutex);
      total += io;
    } catch (...) {
      const std::lock_guard<std::mutex> lock(mutex);
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
  return total;
}

}  // namespace flashattn::io_model
