#include "bench/backward_baseline.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "bench/baseline_softmax.h"
#include "support/elements.h"
#include "support/fail.h"

namespace flashattn::bench {

namespace {

const void* At(const void* base, DType dtype, std::int64_t index) {
  return static_cast<const char*>(base) + index * static_cast<std::int64_t>(size_of(dtype));
}
void* At(void* base, DType dtype, std::int64_t index) {
  return static_cast<char*>(base) + index * static_cast<std::int64_t>(size_of(dtype));
}

template <typename Fn>
void ForRows(std::int64_t n, int threads, const Fn& fn) {
#pragma omp parallel for schedule(static, 16) num_threads(threads) if (threads > 1)
  for (std::int64_t i = 0; i < n; ++i) fn(i);
}

// A strided rows×width block of `dtype` as float32: in place for float32 (leading dimension = row stride),
// else converted into `copy` (leading dimension = width).
struct F32Block {
  float* data;
  std::int64_t ld;
};
F32Block Load(const void* base, DType dtype, std::int64_t row_stride, std::int64_t rows, std::int64_t width,
              std::vector<float>& copy, int threads) {
  if (dtype == DType::kF32) return {static_cast<float*>(const_cast<void*>(base)), row_stride};
  ForRows(rows, threads, [&](std::int64_t r) {
    support::ConvertToF32(At(base, dtype, r * row_stride), dtype, width, copy.data() + r * width);
  });
  return {copy.data(), width};
}
void Store(const F32Block& block, std::int64_t rows, std::int64_t width, DType dtype, void* base,
           std::int64_t row_stride, int threads) {
  if (dtype == DType::kF32) return;
  ForRows(rows, threads, [&](std::int64_t r) {
    support::ConvertFromF32(block.data + r * block.ld, width, dtype, At(base, dtype, r * row_stride));
  });
}

int Int(std::int64_t x) { return static_cast<int>(x); }

}  // namespace

BlasBackwardBaseline::BlasBackwardBaseline(const BackwardParams& params, BaselineArrangement arrangement)
    : params_(params), arrangement_(arrangement), threads_(params.attention.num_threads) {
  validate(params);
  const AttentionParams& p = params.attention;
  if (p.window_left >= 0 || p.window_right >= 0 || p.softcap > 0 || p.alibi_slopes != nullptr ||
      p.mask.kind != MaskKind::kNone || p.dropout_p > 0) {
    support::Fail("the BLAS backward baseline supports causal masking only; got window (", p.window_left, ", ",
         p.window_right, "), softcap ", p.softcap, ", alibi ", p.alibi_slopes != nullptr, ", mask tensor ",
         p.mask.kind != MaskKind::kNone, ", dropout ", p.dropout_p);
  }
  if (p.num_threads < 1) support::Fail("num_threads must be resolved (>= 1) for the baseline, got ", p.num_threads);
  scale_ = p.scale.value_or(1.0f / std::sqrt(static_cast<float>(p.head_dim)));
  const std::int64_t Nq = p.seqlen_q, Nk = p.seqlen_k, d = p.head_dim, dv = p.value_head_dim();
  scratch_.resize(static_cast<std::size_t>(ArrangementWorkers(arrangement_, threads_, p.batch * p.heads_kv)));
  for (Scratch& s : scratch_) {
    s.P.resize(static_cast<std::size_t>(Nq * Nk));
    s.dS.resize(static_cast<std::size_t>(Nq * Nk));
    s.D.resize(static_cast<std::size_t>(Nq));
    const bool f32 = p.dtype == DType::kF32;
    s.dk.resize(static_cast<std::size_t>(f32 ? 0 : Nk * d));
    s.dv.resize(static_cast<std::size_t>(f32 ? 0 : Nk * dv));
    if (f32) continue;
    s.q.resize(static_cast<std::size_t>(Nq * d));
    s.dq.resize(static_cast<std::size_t>(Nq * d));
    s.o.resize(static_cast<std::size_t>(Nq * dv));
    s.d_o.resize(static_cast<std::size_t>(Nq * dv));
    s.k.resize(static_cast<std::size_t>(Nk * d));
    s.v.resize(static_cast<std::size_t>(Nk * dv));
  }
}

std::int64_t BlasBackwardBaseline::ScratchBytes(const BackwardParams& params,
                                                BaselineArrangement arrangement) {
  const AttentionParams& p = params.attention;
  const std::int64_t workers = ArrangementWorkers(arrangement, std::max(p.num_threads, 1), p.batch * p.heads_kv);
  std::int64_t per_worker = 2 * p.seqlen_q * p.seqlen_k + p.seqlen_q;
  if (p.dtype != DType::kF32)
    per_worker += (p.seqlen_q + p.seqlen_k) * 2 * (p.head_dim + p.value_head_dim());
  return workers * per_worker * static_cast<std::int64_t>(sizeof(float));
}

void BlasBackwardBaseline::Run() {
  const std::int64_t heads_kv = params_.attention.heads_kv;
  RunInArrangement(arrangement_, threads_, params_.attention.batch * heads_kv,
                   [&](std::int64_t index, int worker, int row_threads) {
                     Group(index / heads_kv, index % heads_kv, scratch_[worker], row_threads);
                   });
}

void BlasBackwardBaseline::Group(std::int64_t b, std::int64_t hk, Scratch& s, int T) const {
  const BackwardParams& bp = params_;
  const AttentionParams& p = bp.attention;
  const DType t = p.dtype;
  const std::int64_t Nq = p.seqlen_q, Nk = p.seqlen_k, d = p.head_dim, dv = p.value_head_dim();
  const std::int64_t G = p.heads_q / p.heads_kv;
  const F32Block K =
      Load(At(p.k, t, b * p.k_strides.batch + hk * p.k_strides.head), t, p.k_strides.seq, Nk, d, s.k, T);
  const F32Block V =
      Load(At(p.v, t, b * p.v_strides.batch + hk * p.v_strides.head), t, p.v_strides.seq, Nk, dv, s.v, T);
  void* dk_base = At(bp.dk, t, b * bp.dk_strides.batch + hk * bp.dk_strides.head);
  void* dv_base = At(bp.dv, t, b * bp.dv_strides.batch + hk * bp.dv_strides.head);
  const bool f32 = t == DType::kF32;
  const F32Block dK =
      f32 ? F32Block{static_cast<float*>(dk_base), bp.dk_strides.seq} : F32Block{s.dk.data(), d};
  const F32Block dV =
      f32 ? F32Block{static_cast<float*>(dv_base), bp.dv_strides.seq} : F32Block{s.dv.data(), dv};
  ForRows(Nk, T, [&](std::int64_t j) {  // dK = dV = 0, then summed over the group's heads
    std::fill(dK.data + j * dK.ld, dK.data + j * dK.ld + d, 0.0f);
    std::fill(dV.data + j * dV.ld, dV.data + j * dV.ld + dv, 0.0f);
  });
  float* P = s.P.data();
  float* dS = s.dS.data();
  for (std::int64_t h = hk * G; h < (hk + 1) * G; ++h) {
    const F32Block Q =
        Load(At(p.q, t, b * p.q_strides.batch + h * p.q_strides.head), t, p.q_strides.seq, Nq, d, s.q, T);
    const F32Block O =
        Load(At(p.o, t, b * p.o_strides.batch + h * p.o_strides.head), t, p.o_strides.seq, Nq, dv, s.o, T);
    const F32Block dO = Load(At(bp.d_o, t, b * bp.do_strides.batch + h * bp.do_strides.head), t,
                             bp.do_strides.seq, Nq, dv, s.d_o, T);
    void* dq_base = At(bp.dq, t, b * bp.dq_strides.batch + h * bp.dq_strides.head);
    const F32Block dQ =
        f32 ? F32Block{static_cast<float*>(dq_base), bp.dq_strides.seq} : F32Block{s.dq.data(), d};
    const float* lse = p.lse + (b * p.heads_q + h) * Nq;

    // S = s·Q Kᵀ into P, then P = exp(S − LSE) on each row's visible prefix; D = rowsum(dO ∘ O).
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Int(Nq), Int(Nk), Int(d), scale_, Q.data, Int(Q.ld),
                K.data, Int(K.ld), 0.0f, P, Int(Nk));
    ForRows(Nq, T, [&](std::int64_t i) {
      const std::int64_t visible = p.causal ? std::clamp<std::int64_t>(i + Nk - Nq + 1, 0, Nk) : Nk;
      ExpShiftedRow(P + i * Nk, visible, Nk, lse[i]);
      float D = 0.0f;
      for (std::int64_t c = 0; c < dv; ++c) D += dO.data[i * dO.ld + c] * O.data[i * O.ld + c];
      s.D[i] = D;
    });
    // dV += Pᵀ dO;  dP = dO Vᵀ into dS, then dS = P ∘ (dP − D).
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Int(Nk), Int(dv), Int(Nq), 1.0f, P, Int(Nk), dO.data,
                Int(dO.ld), 1.0f, dV.data, Int(dV.ld));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Int(Nq), Int(Nk), Int(dv), 1.0f, dO.data, Int(dO.ld),
                V.data, Int(V.ld), 0.0f, dS, Int(Nk));
    ForRows(Nq, T, [&](std::int64_t i) {
      const float D = s.D[i];
      float* dS_i = dS + i * Nk;
      const float* P_i = P + i * Nk;
      for (std::int64_t j = 0; j < Nk; ++j) dS_i[j] = P_i[j] * (dS_i[j] - D);
    });
    // dQ = s·dS K;  dK += s·dSᵀ Q.
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Int(Nq), Int(d), Int(Nk), scale_, dS, Int(Nk),
                K.data, Int(K.ld), 0.0f, dQ.data, Int(dQ.ld));
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Int(Nk), Int(d), Int(Nq), scale_, dS, Int(Nk),
                Q.data, Int(Q.ld), 1.0f, dK.data, Int(dK.ld));
    Store(dQ, Nq, d, t, dq_base, bp.dq_strides.seq, T);
  }
  Store(dK, Nk, d, t, dk_base, bp.dk_strides.seq, T);
  Store(dV, Nk, dv, t, dv_base, bp.dv_strides.seq, T);
}

}  // namespace flashattn::bench
