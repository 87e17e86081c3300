#include "bench/modes.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "bench/backward_baseline.h"
#include "bench/sparse.h"
#include "flashattn/backward.h"

namespace flashattn::bench {

namespace {

// The caller-owned tensors of one backward call, contiguous (batch, seq, head, dim), filled and resident.
struct Tensors {
  Tensors(const AttentionParams& p, std::uint64_t seed)
      : q(RandomElements(p.batch * p.seqlen_q * p.heads_q * p.head_dim, p.dtype, seed)),
        k(RandomElements(p.batch * p.seqlen_k * p.heads_kv * p.head_dim, p.dtype, seed + 1)),
        v(RandomElements(p.batch * p.seqlen_k * p.heads_kv * p.value_head_dim(), p.dtype, seed + 2)),
        o(RandomElements(p.batch * p.seqlen_q * p.heads_q * p.value_head_dim(), p.dtype, 0)),
        d_o(RandomElements(p.batch * p.seqlen_q * p.heads_q * p.value_head_dim(), p.dtype, seed + 3)),
        dq(RandomElements(p.batch * p.seqlen_q * p.heads_q * p.head_dim, p.dtype, 0)),
        dk(RandomElements(p.batch * p.seqlen_k * p.heads_kv * p.head_dim, p.dtype, 0)),
        dv(RandomElements(p.batch * p.seqlen_k * p.heads_kv * p.value_head_dim(), p.dtype, 0)),
        lse(static_cast<std::size_t>(p.batch * p.heads_q * p.seqlen_q), 0.0f) {}

  // Gradients into dq, dk, dv (or into the given buffers, for the baseline).
  BackwardParams Params(const AttentionParams& attention, std::vector<std::uint16_t>* gq,
                        std::vector<std::uint16_t>* gk, std::vector<std::uint16_t>* gv) {
    BackwardParams b;
    b.attention = attention;
    b.attention.q = q.data();
    b.attention.k = k.data();
    b.attention.v = v.data();
    b.attention.o = o.data();
    b.attention.lse = lse.data();
    b.d_o = d_o.data();
    b.dq = gq->data();
    b.dk = gk->data();
    b.dv = gv->data();
    b.set_contiguous_strides();
    return b;
  }
  std::int64_t Bytes() const {
    std::size_t slots = 0;
    for (const auto* t : {&q, &k, &v, &o, &d_o, &dq, &dk, &dv}) slots += t->size();
    return static_cast<std::int64_t>(slots * sizeof(std::uint16_t) + lse.size() * sizeof(float));
  }

  std::vector<std::uint16_t> q, k, v, o, d_o, dq, dk, dv;
  std::vector<float> lse;
};

}  // namespace

Row RunBackward(const BenchCase& c, const RunOptions& options, const Limits& limits) {
  Row row = StartRow(c, limits);
  Tensors tensors(c.Params(), 0x5eed);
  BackwardParams params = tensors.Params(c.Params(), &tensors.dq, &tensors.dk, &tensors.dv);
  const std::vector<float> sinks = SinkLogits(c);
  std::vector<float> dsinks(sinks.size());
  params.attention.sinks = SinksOrNull(sinks);
  params.dsinks = sinks.empty() ? nullptr : dsinks.data();
  const SparseInputs sparse(c);
  sparse.Apply(&params.attention);
  forward(params.attention);  // O and LSE, as training would have them
  validate(params);
  row.tensor_bytes = tensors.Bytes();

  const auto call = [&] { backward(params); };
  TimeLibraryCall(call, options, &row);
  if (c.sparsity != Sparsity::kNone) {  // against the dense call (its own O and LSE), in place of the baseline
    BackwardParams dense = params;
    dense.attention = DenseParams(params.attention);
    forward(dense.attention);
    Row dense_row = row;
    TimeLibraryCall([&] { backward(dense); }, options, &dense_row);
    row.note += (row.note.empty() ? "" : "; ") +
                SparseNote(row.timing.median_ms, dense_row.timing.median_ms, sparse.VisitedFraction());
    forward(params.attention);  // the sparse call's O and LSE again, as the row's outputs
    return row;
  }

  if (options.baseline && !c.sinks) {  // the OpenBLAS baseline has no sinks
    std::vector<std::uint16_t> dq(tensors.dq.size()), dk(tensors.dk.size()), dv(tensors.dv.size());
    const BackwardParams baseline_params = tensors.Params(params.attention, &dq, &dk, &dv);
    const PrepareBaseline prepare = PrepareWithinScratchLimit<BlasBackwardBaseline>(baseline_params, options);
    row.baseline = TimeArrangements(c.threads, options.timing, prepare, &row.note);
    if (row.baseline) {
      const DType t = c.dtype;
      const std::int64_t per_slot = t == DType::kF32 ? 2 : 1;
      double diff = 0;
      for (const auto& [mine, theirs] :
           {std::pair{&tensors.dq, &dq}, {&tensors.dk, &dk}, {&tensors.dv, &dv}}) {
        const double d = MaxAbsDiff(mine->data(), t, theirs->data(), t,
                                    static_cast<std::int64_t>(mine->size()) / per_slot);
        diff = std::isnan(d) ? d : std::max(diff, d);
        if (std::isnan(diff)) break;
      }
      row.max_abs_diff_vs_baseline = diff;
    }
  }
  return row;
}

}  // namespace flashattn::bench
