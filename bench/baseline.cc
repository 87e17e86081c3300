#include "bench/baseline.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "bench/baseline_softmax.h"
#include "support/elements.h"
#include "support/fail.h"

namespace flashattn::bench {

std::string_view ToString(BaselineArrangement arrangement) {
  switch (arrangement) {
    case BaselineArrangement::kHeadsParallel: return "heads-parallel";
    case BaselineArrangement::kThreadedBlas: return "threaded-blas";
  }
  return "unknown";
}

int ArrangementWorkers(BaselineArrangement arrangement, int threads, std::int64_t units) {
  if (arrangement == BaselineArrangement::kThreadedBlas) return 1;
  return static_cast<int>(std::min<std::int64_t>(threads, units));
}

void RunInArrangement(BaselineArrangement arrangement, int threads, std::int64_t units,
                      const std::function<void(std::int64_t unit, int worker, int row_threads)>& solve) {
  if (arrangement == BaselineArrangement::kThreadedBlas) {
    openblas_set_num_threads(threads);
    for (std::int64_t unit = 0; unit < units; ++unit) solve(unit, 0, threads);
    return;
  }
  openblas_set_num_threads(1);
#pragma omp parallel for schedule(dynamic, 1) num_threads(ArrangementWorkers(arrangement, threads, units))
  for (std::int64_t unit = 0; unit < units; ++unit) solve(unit, omp_get_thread_num(), 1);
}

namespace {

// Address of element `index` of an array of `dtype`.
const void* ElementAt(const void* base, DType dtype, std::int64_t index) {
  return static_cast<const char*>(base) + index * static_cast<std::int64_t>(size_of(dtype));
}
void* ElementAt(void* base, DType dtype, std::int64_t index) {
  return static_cast<char*>(base) + index * static_cast<std::int64_t>(size_of(dtype));
}

// fn(i) for i < n, on `threads` threads (rows of one head: chunks of 16 rows dealt round-robin, so the long
// rows at the bottom of a causal head are shared out too).
template <typename Fn>
void ForRows(std::int64_t n, int threads, const Fn& fn) {
#pragma omp parallel for schedule(static, 16) num_threads(threads) if (threads > 1)
  for (std::int64_t i = 0; i < n; ++i) fn(i);
}

// Converts `rows` strided rows of `width` elements to a dense float32 rows×width matrix.
void RowsToF32(const void* base, DType dtype, std::int64_t row_stride, std::int64_t rows, std::int64_t width,
               float* dst, int threads) {
  ForRows(rows, threads, [&](std::int64_t r) {
    support::ConvertToF32(ElementAt(base, dtype, r * row_stride), dtype, width, dst + r * width);
  });
}

}  // namespace

BlasBaseline::BlasBaseline(const AttentionParams& params, BaselineArrangement arrangement)
    : params_(params), arrangement_(arrangement), threads_(params.num_threads) {
  validate(params);
  if (params.window_left >= 0 || params.window_right >= 0 || params.softcap > 0 ||
      params.alibi_slopes != nullptr || params.mask.kind != MaskKind::kNone) {
    support::Fail("the BLAS baseline supports causal masking only; got window (", params.window_left, ", ",
         params.window_right, "), softcap ", params.softcap, ", alibi ", params.alibi_slopes != nullptr,
         ", mask tensor ", params.mask.kind != MaskKind::kNone);
  }
  if (params.num_threads < 1)
    support::Fail("num_threads must be resolved (>= 1) for the baseline, got ", params.num_threads);
  scale_ = params.scale.value_or(1.0f / std::sqrt(static_cast<float>(params.head_dim)));

  const std::int64_t Nq = params.seqlen_q, Nk = params.seqlen_k, d = params.head_dim, dv = params.value_head_dim();
  const int workers = ArrangementWorkers(arrangement_, threads_, params.batch * params.heads_q);
  scratch_.resize(static_cast<std::size_t>(workers));
  for (Scratch& s : scratch_) {
    s.S.resize(static_cast<std::size_t>(Nq * Nk));
    if (params.dtype != DType::kF32) {
      s.q.resize(static_cast<std::size_t>(Nq * d));
      s.k.resize(static_cast<std::size_t>(Nk * d));
      s.v.resize(static_cast<std::size_t>(Nk * dv));
      s.o.resize(static_cast<std::size_t>(Nq * dv));
    }
  }
}

std::int64_t BlasBaseline::ScratchBytes(const AttentionParams& p, BaselineArrangement arrangement) {
  const std::int64_t workers = ArrangementWorkers(arrangement, std::max(p.num_threads, 1), p.batch * p.heads_q);
  std::int64_t per_worker = p.seqlen_q * p.seqlen_k;
  if (p.dtype != DType::kF32)
    per_worker +=
        p.seqlen_q * p.head_dim + p.seqlen_k * (p.head_dim + p.value_head_dim()) + p.seqlen_q * p.value_head_dim();
  return workers * per_worker * static_cast<std::int64_t>(sizeof(float));
}

void BlasBaseline::Run() {
  RunInArrangement(arrangement_, threads_, params_.batch * params_.heads_q,
                   [&](std::int64_t index, int worker, int row_threads) {
                     Head(index / params_.heads_q, index % params_.heads_q, scratch_[worker], row_threads);
                   });
}

void BlasBaseline::Head(std::int64_t b, std::int64_t h, Scratch& s, int row_threads) const {
  const AttentionParams& p = params_;
  const std::int64_t Nq = p.seqlen_q, Nk = p.seqlen_k, d = p.head_dim, dv = p.value_head_dim();
  const std::int64_t h_kv = h / (p.heads_q / p.heads_kv);
  const void* q = ElementAt(p.q, p.dtype, b * p.q_strides.batch + h * p.q_strides.head);
  const void* k = ElementAt(p.k, p.dtype, b * p.k_strides.batch + h_kv * p.k_strides.head);
  const void* v = ElementAt(p.v, p.dtype, b * p.v_strides.batch + h_kv * p.v_strides.head);
  void* o = ElementAt(p.o, p.dtype, b * p.o_strides.batch + h * p.o_strides.head);

  // float32 tensors go to BLAS in place (the sequence stride is the leading dimension); others via copies.
  const bool f32 = p.dtype == DType::kF32;
  const float* Q = f32 ? static_cast<const float*>(q) : s.q.data();
  const float* K = f32 ? static_cast<const float*>(k) : s.k.data();
  const float* V = f32 ? static_cast<const float*>(v) : s.v.data();
  float* O = f32 ? static_cast<float*>(o) : s.o.data();
  const std::int64_t ldq = f32 ? p.q_strides.seq : d, ldk = f32 ? p.k_strides.seq : d;
  const std::int64_t ldv = f32 ? p.v_strides.seq : dv, ldo = f32 ? p.o_strides.seq : dv;
  if (!f32) {
    RowsToF32(q, p.dtype, p.q_strides.seq, Nq, d, s.q.data(), row_threads);
    RowsToF32(k, p.dtype, p.k_strides.seq, Nk, d, s.k.data(), row_threads);
    RowsToF32(v, p.dtype, p.v_strides.seq, Nk, dv, s.v.data(), row_threads);
  }

  // S = s·Q Kᵀ
  float* S = s.S.data();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(Nq), static_cast<int>(Nk),
              static_cast<int>(d), scale_, Q, static_cast<int>(ldq), K, static_cast<int>(ldk), 0.0f, S,
              static_cast<int>(Nk));
  // P = softmax(S) per row over the keys row i may see: all, or j ≤ i + Nk − Nq when causal.
  float* lse = p.lse == nullptr ? nullptr : p.lse + (b * p.heads_q + h) * Nq;
  ForRows(Nq, row_threads, [&](std::int64_t i) {
    const std::int64_t visible = p.causal ? std::clamp<std::int64_t>(i + Nk - Nq + 1, 0, Nk) : Nk;
    const float row_lse = SafeSoftmaxRow(S + i * Nk, visible, Nk);
    if (lse != nullptr) lse[i] = row_lse;
  });
  // O = P V
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(Nq), static_cast<int>(dv),
              static_cast<int>(Nk), 1.0f, S, static_cast<int>(Nk), V, static_cast<int>(ldv), 0.0f, O,
              static_cast<int>(ldo));
  if (!f32) {
    ForRows(Nq, row_threads, [&](std::int64_t i) {
      support::ConvertFromF32(O + i * dv, dv, p.dtype, ElementAt(o, p.dtype, i * p.o_strides.seq));
    });
  }
}

}  // namespace flashattn::bench
