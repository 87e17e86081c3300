// The closed forms of io_model.h. Each function first writes the per-head count as the loops of
// src/reference/ produce it, then multiplies by the number of (batch, query head) problems.
#include "io_model/io_model.h"

#include <algorithm>

#include "common/checked.h"
#include "common/window.h"
#include "kernels/fused_forward.h"
#include "reference/reference.h"

namespace flashattn::io_model {

namespace {

constexpr std::int64_t kF32 = 4;  // l, m, LSE and decode partials are float32

// Elements of the element type and of float32, read and written, for one head.
struct HeadCount {
  std::int64_t read = 0, read_f32 = 0;
  std::int64_t written = 0, written_f32 = 0;
};

IoCount ForCall(const HeadCount& head, std::int64_t problems, std::int64_t element_bytes) {
  IoCount io;
  io.read = problems * (head.read + head.read_f32);
  io.written = problems * (head.written + head.written_f32);
  io.read_bytes = problems * (head.read * element_bytes + head.read_f32 * kF32);
  io.written_bytes = problems * (head.written * element_bytes + head.written_f32 * kF32);
  return io;
}

std::int64_t CeilDiv(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

struct Shape {
  std::int64_t problems, Nq, Nk, d, dv, lse, element_bytes;
};

Shape ShapeOf(const AttentionParams& p) {
  return {p.batch * p.heads_q, p.seqlen_q,  p.seqlen_k, p.head_dim, p.HeadDimV(),
          p.lse != nullptr ? 1 : 0, static_cast<std::int64_t>(SizeOf(p.dtype))};
}

// Matrix-product FLOPs of `rows` query rows against `cols` keys: S = Q Kᵀ and O = P V.
double ProductFlops(std::int64_t rows, std::int64_t cols, std::int64_t d, std::int64_t dv) {
  return 2.0 * static_cast<double>(rows) * static_cast<double>(cols) * static_cast<double>(d + dv);
}

}  // namespace

std::int64_t TileBytes(std::int64_t Br, std::int64_t Bc, std::int64_t d, std::int64_t dv) {
  return kF32 * (Br * (d + dv) + Bc * (d + dv) + Br * Bc + 2 * Br);
}

Cost Standard(const AttentionParams& params) {
  const auto [problems, Nq, Nk, d, dv, lse, E] = ShapeOf(params);
  HeadCount head;
  head.read = Nq * d + Nk * d    // pass 1: Q, K
              + Nq * Nk          // pass 2: S
              + Nq * Nk + Nk * dv;  // pass 3: P, V
  head.written = Nq * Nk + Nq * Nk + Nq * dv;  // S, P, O
  head.written_f32 = lse * Nq;
  Cost cost;
  cost.io = ForCall(head, problems, E);
  cost.flops = problems * ProductFlops(Nq, Nk, d, dv);
  return cost;
}

Cost Flash1(const AttentionParams& params) {
  const auto [problems, Nq, Nk, d, dv, lse, E] = ShapeOf(params);
  const auto [Br, Bc] = reference::ChooseBlockSizes(params);
  const std::int64_t Tc = CeilDiv(Nk, Bc);
  HeadCount head;
  // Initialization writes O, l, m. Each of the Tc outer steps reads K_j, V_j, then every Q block reads
  // Q_i, O_i, l_i, m_i and writes O_i, l_i, m_i: over the inner loop that is all Nq rows of each.
  head.read = Nk * (d + dv) + Tc * Nq * (d + dv);
  head.read_f32 = Tc * 2 * Nq + lse * 2 * Nq;  // l, m per outer step; again for LSE = m + log l
  head.written = Nq * dv + Tc * Nq * dv;
  head.written_f32 = 2 * Nq + Tc * 2 * Nq + lse * Nq;
  Cost cost;
  cost.io = ForCall(head, problems, E);
  cost.Br = Br, cost.Bc = Bc;
  cost.flops = problems * ProductFlops(Nq, Nk, d, dv);
  return cost;
}

Cost Flash2(const AttentionParams& params) {
  const auto [problems, Nq, Nk, d, dv, lse, E] = ShapeOf(params);
  const auto [Br, Bc] = reference::ChooseBlockSizes(params);
  const std::int64_t Tr = CeilDiv(Nq, Br);
  HeadCount head;
  head.read = Nq * d + Tr * Nk * (d + dv);  // Q_i once; all of K, V once per Q block
  head.written = Nq * dv;
  head.written_f32 = lse * Nq;
  Cost cost;
  cost.io = ForCall(head, problems, E);
  cost.Br = Br, cost.Bc = Bc;
  cost.flops = problems * ProductFlops(Nq, Nk, d, dv);
  return cost;
}

Cost Flash2SkippingMaskedTiles(const AttentionParams& params, std::int64_t Br, std::int64_t Bc) {
  if (Br < 1 || Bc < 1) Fail("block sizes must be >= 1, got Br=", Br, " Bc=", Bc);
  const auto [problems, Nq, Nk, d, dv, lse, E] = ShapeOf(params);
  // Row r sees keys [r + δ − left, r + δ + right] (SPEC §5, δ = Nk − Nq). These bands move by one per row,
  // so the rows of a Q block together see one interval [lo, hi], and a K/V tile holds a visible key iff it
  // meets that interval.
  const auto [left, right] = WindowReachOf(params.causal, params.window_left, params.window_right);
  const std::int64_t delta = Nk - Nq;
  HeadCount head;
  head.read = Nq * d;
  head.written = Nq * dv;
  head.written_f32 = lse * Nq;
  double flops = 0.0;
  for (std::int64_t i0 = 0; i0 < Nq; i0 += Br) {
    const std::int64_t rows = std::min(Br, Nq - i0);
    const std::int64_t lo = std::max<std::int64_t>(0, i0 + delta - left);
    const std::int64_t hi = std::min(Nk - 1, i0 + rows - 1 + delta + right);
    if (lo > hi) continue;
    const std::int64_t cols = std::min(Nk, (hi / Bc + 1) * Bc) - (lo / Bc) * Bc;  // keys of visited tiles
    head.read += cols * (d + dv);
    flops += ProductFlops(rows, cols, d, dv);
  }
  Cost cost;
  cost.io = ForCall(head, problems, E);
  cost.Br = Br, cost.Bc = Bc;
  cost.flops = problems * flops;
  return cost;
}

Cost Fused(const AttentionParams& params) {
  const kernels::FusedTiling tiling = kernels::ChooseFusedTiling(params);
  Cost cost = Flash2SkippingMaskedTiles(params, tiling.Br, tiling.Bc);
  const std::int64_t packed = params.batch * params.heads_kv * params.seqlen_k * params.head_dim;
  const std::int64_t E = static_cast<std::int64_t>(SizeOf(params.dtype));
  cost.io.read += packed, cost.io.read_bytes += packed * E;  // packing reads each K row once
  cost.io.written += packed, cost.io.written_bytes += packed * E;  // and writes it as panels
  return cost;
}

Cost Decode(const AttentionParams& params, std::int64_t splits) {
  if (splits < 1) Fail("splits must be >= 1, got ", splits);
  const std::int64_t Nq = params.seqlen_q, Nk = params.seqlen_k, d = params.head_dim, dv = params.HeadDimV();
  const std::int64_t lse = params.lse != nullptr ? 1 : 0;
  const std::int64_t kv_problems = params.batch * params.heads_kv;
  const std::int64_t R = (params.heads_q / params.heads_kv) * Nq;  // query rows sharing one K/V head
  splits = std::clamp<std::int64_t>(splits, 1, std::max<std::int64_t>(Nk, 1));
  HeadCount head;
  head.read = Nk * (d + dv) + splits * R * d;  // each K/V row once; all query rows per chunk
  head.written_f32 = splits * R * (dv + 1);     // partials (O_k, LSE_k)
  head.read_f32 = splits * R * (dv + 1);        // the merge reads them back
  head.written = R * dv;
  head.written_f32 += lse * R;
  Cost cost;
  cost.io = ForCall(head, kv_problems, static_cast<std::int64_t>(SizeOf(params.dtype)));
  cost.Bc = CeilDiv(Nk, splits);
  cost.flops = kv_problems * ProductFlops(R, Nk, d, dv);
  return cost;
}

IoCount RunCounted(const AttentionParams& params, Algorithm algorithm) {
  Validate(params);
  IoCount io;
  switch (algorithm) {
    case Algorithm::kStandard: reference::Standard(params, &io); return io;
    case Algorithm::kFlash1: reference::Flash1(params, &io); return io;
    case Algorithm::kFlash2: reference::Flash2(params, &io); return io;
    default: break;
  }
  Fail("algorithm ", ToString(algorithm), " has no instrumented run (only standard, flash1, flash2)");
}

}  // namespace flashattn::io_model
