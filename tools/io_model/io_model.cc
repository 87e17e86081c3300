// The closed forms of io_model.h. Each function first writes the count of one unit of work as the loops
// produce it — a (batch, query head) problem, a (batch, K/V head) for the fused kernel's packing, a sequence
// for decode — then multiplies by the number of units.
#include "io_model/io_model.h"

#include <algorithm>

#include "common/checked.h"
#include "common/score.h"
#include "flashattn/decode.h"
#include "forward/forward.h"
#include "io_model/counted.h"
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

// A counted run's traffic, as the reference layer's accessors summed it.
IoCount OfCall(const reference::IoCount& io) { return {io.read, io.written, io.read_bytes, io.written_bytes}; }

std::int64_t CeilDiv(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

struct Shape {
  std::int64_t problems, Nq, Nk, d, dv, lse, element_bytes;
};

Shape ShapeOf(const AttentionParams& p) {
  return {p.batch * p.heads_q, p.seqlen_q,  p.seqlen_k, p.head_dim, p.value_head_dim(),
          p.lse != nullptr ? 1 : 0, static_cast<std::int64_t>(size_of(p.dtype))};
}

// Matrix-product FLOPs of `rows` query rows against `cols` keys: S = Q Kᵀ and O = P V.
double ProductFlops(std::int64_t rows, std::int64_t cols, std::int64_t d, std::int64_t dv) {
  return 2.0 * static_cast<double>(rows) * static_cast<double>(cols) * static_cast<double>(d + dv);
}

// The cost of a call of `problems` (batch, query head) problems that each move `head`, with block sizes
// (Br, Bc) and `head_flops` per problem.
Cost CostOfCall(const HeadCount& head, std::int64_t problems, std::int64_t element_bytes, std::int64_t Br,
                std::int64_t Bc, double head_flops) {
  Cost cost;
  cost.io = ForCall(head, problems, element_bytes);
  cost.Br = Br, cost.Bc = Bc;
  cost.flops = static_cast<double>(problems) * head_flops;
  return cost;
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
  return CostOfCall(head, problems, E, 0, 0, ProductFlops(Nq, Nk, d, dv));
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
  return CostOfCall(head, problems, E, Br, Bc, ProductFlops(Nq, Nk, d, dv));
}

Cost Flash2(const AttentionParams& params) {
  const auto [problems, Nq, Nk, d, dv, lse, E] = ShapeOf(params);
  const auto [Br, Bc] = reference::ChooseBlockSizes(params);
  const std::int64_t Tr = CeilDiv(Nq, Br);
  HeadCount head;
  head.read = Nq * d + Tr * Nk * (d + dv);  // Q_i once; all of K, V once per Q block
  head.written = Nq * dv;
  head.written_f32 = lse * Nq;
  return CostOfCall(head, problems, E, Br, Bc, ProductFlops(Nq, Nk, d, dv));
}

Cost Flash2SkippingMaskedTiles(const AttentionParams& params, std::int64_t Br, std::int64_t Bc) {
  if (Br < 1 || Bc < 1) Fail("block sizes must be >= 1, got Br=", Br, " Bc=", Bc);
  const auto [problems, Nq, Nk, d, dv, lse, E] = ShapeOf(params);
  // Row r sees keys [r + δ − left, r + δ + right] (docs/algorithms.md §6, δ = Nk − Nq). These bands move by
  // one per row, so the rows of a Q block together see one interval [lo, hi], and a K/V tile holds a visible
  // key iff it meets that interval.
  const auto [left, right] = Band::Of(params);
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
  return CostOfCall(head, problems, E, Br, Bc, flops);
}

FusedGeometry FusedGeometryOf(const AttentionParams& params) {
  const std::int64_t Nq = params.seqlen_q, Nk = params.seqlen_k, d = params.head_dim, dv = params.value_head_dim();
  const forward_kernel::FusedTiling tiling = forward_kernel::ChooseFusedTiling(params);
  FusedGeometry g;
  // FusedForwardT: "a block longer than its sequence is that sequence".
  g.Br = std::min(tiling.Br, std::max<std::int64_t>(1, Nq));
  g.Bc = std::min(tiling.Bc, std::max<std::int64_t>(1, Nk));
  g.Tr = CeilDiv(Nq, g.Br), g.Tc = CeilDiv(Nk, g.Bc);
  g.L = FusedFloatLanes(), g.NR = 2 * g.L;
  g.Bc_pad = CeilDiv(g.Bc, g.NR) * g.NR, g.dv_pad = CeilDiv(dv, g.L) * g.L;
  // FusedForwardT widens float16/bfloat16 as it packs (PacksKvWide); SolveAllBlocks packs V next to K when
  // the packed K and V of one (batch, K/V head) fit kPackBudgetBytes.
  const std::int64_t E = static_cast<std::int64_t>(size_of(params.dtype));
  g.packed_element_bytes = forward_kernel::PacksKvWide(params.dtype, g.Br) ? kF32 : E;
  constexpr std::int64_t kPackBudgetBytes = 16 << 20;
  g.packs_v = (g.Tc * g.Bc_pad * d + g.Tc * g.Bc * g.dv_pad) * g.packed_element_bytes <= kPackBudgetBytes;
  return g;
}

Cost Fused(const AttentionParams& params) {
  const auto [problems, Nq, Nk, d, dv, lse, E] = ShapeOf(params);
  const FusedGeometry g = FusedGeometryOf(params);
  Cost cost;
  cost.Br = g.Br, cost.Bc = g.Bc;
  if (params.batch == 0 || Nq == 0) return cost;  // the kernel returns before packing
  // Per (batch, K/V head): K_j read (cols·d) and written as Bc_pad·d packed keys; V_j read (cols·dv) and
  // written as cols·dv_pad when V is packed.
  // Packed elements are counted as float32 when packed wide (PacksKvWide), else in the call's element type.
  const bool wide = g.packed_element_bytes != E;
  HeadCount pack;
  pack.read = Nk * d + (g.packs_v ? Nk * dv : 0);
  (wide ? pack.written_f32 : pack.written) = g.Tc * g.Bc_pad * d + (g.packs_v ? Nk * g.dv_pad : 0);
  // Per (batch, query head): Q once, O (and LSE) once; per Q block the K/V blocks from ⌊lo/Bc⌋ to ⌊hi/Bc⌋
  // (as in Flash2SkippingMaskedTiles): K_j padded to whole panels of NR keys — Bc_pad for every block but
  // the last, whose cols_last = Nk − (Tc − 1)·Bc keys round up to a multiple of NR — and V_j.
  const auto [left, right] = Band::Of(params);
  const std::int64_t delta = Nk - Nq, last_panel_keys = CeilDiv(Nk - (g.Tc - 1) * g.Bc, g.NR) * g.NR;
  HeadCount head;
  head.read = Nq * d;
  head.written = Nq * dv;
  head.written_f32 = lse * Nq;
  double flops = 0.0;
  for (std::int64_t i0 = 0; i0 < Nq; i0 += g.Br) {
    const std::int64_t rows = std::min(g.Br, Nq - i0);
    const std::int64_t lo = std::max<std::int64_t>(0, i0 + delta - left);
    const std::int64_t hi = std::min(Nk - 1, i0 + rows - 1 + delta + right);
    if (lo > hi) continue;
    const std::int64_t first = lo / g.Bc, last = hi / g.Bc;
    const std::int64_t keys = std::min(Nk, (last + 1) * g.Bc) - first * g.Bc;
    const std::int64_t panel_keys =
        (last - first + 1) * g.Bc_pad - (last == g.Tc - 1 ? g.Bc_pad - last_panel_keys : 0);
    (wide ? head.read_f32 : head.read) += panel_keys * d + (g.packs_v ? keys * g.dv_pad : 0);
    if (!g.packs_v) head.read += keys * dv;  // the caller's V rows
    flops += ProductFlops(rows, keys, d, dv);
  }
  cost.io = ForCall(pack, params.batch * params.heads_kv, E);
  cost.io += ForCall(head, problems, E);
  cost.flops = problems * flops;
  return cost;
}

namespace {

void CheckDecodable(const AttentionParams& params) {
  if (params.value_head_dim() != params.head_dim) {
    Fail("decode needs head_dim_v = head_dim (its K and V share head_dim), got head_dim ", params.head_dim,
         " head_dim_v ", params.value_head_dim());
  }
  if (params.mask.kind != MaskKind::kNone) Fail("decode takes no mask tensor");
  if (params.dropout_p != 0.0f) Fail("decode has no dropout, got dropout_p ", params.dropout_p);
}

}  // namespace

Cost Decode(const AttentionParams& params, std::int64_t splits) {
  if (splits < 1) Fail("splits must be >= 1, got ", splits);
  CheckDecodable(params);
  const std::int64_t Nq = params.seqlen_q, Nk = params.seqlen_k, d = params.head_dim;
  const std::int64_t lse = params.lse != nullptr ? 1 : 0;
  const std::int64_t rows = params.heads_q * Nq;  // query rows of one sequence, all heads
  Cost cost;
  if (params.batch == 0 || rows == 0) return cost;  // decode() only appends
  // The keys some row may see: row i's band is [i + δ − left, i + δ + right], δ = Nk − Nq.
  const auto [left, right] = Band::Of(params);
  const std::int64_t delta = Nk - Nq;
  const std::int64_t j_begin = std::clamp<std::int64_t>(delta - left, 0, Nk);
  const std::int64_t j_end = std::max(j_begin, std::clamp<std::int64_t>(Nk + right, 0, Nk));
  const std::int64_t chunk = CeilDiv(j_end - j_begin, splits);
  HeadCount seq;                            // per sequence
  seq.read = rows * d;                      // Q, gathered
  seq.written_f32 = rows * d;               // into the float32 Q tile
  seq.written_f32 += splits * rows * (d + 1);  // every chunk's partials (O_k, LSE_k)
  seq.read_f32 = splits * rows;             // the merge reads every LSE_k
  double flops = 0.0;
  for (std::int64_t s = 0; s < splits; ++s) {
    const std::int64_t a = std::min(j_end, j_begin + s * chunk), e = std::min(j_end, a + chunk);
    if (a == e) continue;
    seq.read_f32 += rows * d;                       // the Q tile
    seq.read += params.heads_kv * (e - a) * 2 * d;  // each K and V row of the chunk once per K/V head
    // Query i sees a key of [a, e) iff i + δ − left ≤ e − 1 and i + δ + right ≥ a; then LSE_k is finite
    // and the merge reads O_k, for each of the Hq heads.
    const std::int64_t i_lo = std::max<std::int64_t>(0, a - delta - right);
    const std::int64_t i_hi = std::min(Nq - 1, e - 1 - delta + left);
    seq.read_f32 += params.heads_q * std::max<std::int64_t>(0, i_hi - i_lo + 1) * d;
    flops += ProductFlops(rows, e - a, d, d);
  }
  seq.written = rows * d;
  seq.written_f32 += lse * rows;
  cost.io = ForCall(seq, params.batch, static_cast<std::int64_t>(size_of(params.dtype)));
  cost.Bc = chunk;
  cost.flops = params.batch * flops;
  return cost;
}

std::int64_t DecodeSplits(const AttentionParams& params) {
  return choose_num_splits(params.batch, params.seqlen_k, params.num_threads);
}

IoCount RunCounted(const AttentionParams& params, Algorithm algorithm) {
  validate(params);
  reference::IoCount io;
  switch (algorithm) {
    case Algorithm::kStandard: reference::Standard(params, &io); return OfCall(io);
    case Algorithm::kFlash1: reference::Flash1(params, &io); return OfCall(io);
    case Algorithm::kFlash2: reference::Flash2(params, &io); return OfCall(io);
    case Algorithm::kFused: return OfCall(CountFused(params));
    default: break;
  }
  Fail("algorithm ", to_string(algorithm), " has no instrumented run (only standard, flash1, flash2, fused)");
}

IoCount RunCountedDecode(const AttentionParams& params, std::int64_t splits) {
  if (splits < 1) Fail("splits must be >= 1, got ", splits);
  validate(params);
  CheckDecodable(params);
  return OfCall(CountDecode(params, splits));
}

}  // namespace flashattn::io_model
