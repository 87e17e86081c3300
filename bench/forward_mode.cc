#include "bench/modes.h"

#include <vector>

#include "bench/baseline.h"
#include "bench/sparse.h"

namespace flashattn::bench {

namespace {

// The caller-owned tensors of one forward call, filled and resident before anything is measured.
class Tensors {
 public:
  Tensors(const AttentionParams& p, std::uint64_t seed)
      : q_(RandomElements(p.batch * p.seqlen_q * p.heads_q * p.head_dim, p.dtype, seed)),
        k_(RandomElements(p.batch * p.seqlen_k * p.heads_kv * p.head_dim, p.dtype, seed + 1)),
        v_(RandomElements(p.batch * p.seqlen_k * p.heads_kv * p.value_head_dim(), p.dtype, seed + 2)),
        o_(RandomElements(p.batch * p.seqlen_q * p.heads_q * p.value_head_dim(), p.dtype, 0)),
        lse_(static_cast<std::size_t>(p.batch * p.heads_q * p.seqlen_q), 0.0f) {}

  void Attach(AttentionParams& p) {
    p.q = q_.data();
    p.k = k_.data();
    p.v = v_.data();
    p.o = o_.data();
    p.lse = lse_.data();
  }
  std::int64_t OutputSlots() const { return static_cast<std::int64_t>(o_.size()); }
  std::int64_t Bytes() const {
    return static_cast<std::int64_t>((q_.size() + k_.size() + v_.size() + o_.size()) * sizeof(std::uint16_t) +
                                     lse_.size() * sizeof(float));
  }

 private:
  std::vector<std::uint16_t> q_, k_, v_, o_;
  std::vector<float> lse_;
};

}  // namespace

Row RunForward(const BenchCase& c, const RunOptions& options, const Limits& limits) {
  Row row = StartRow(c, limits);
  AttentionParams params = c.Params();
  Tensors tensors(params, 0x5eed);
  tensors.Attach(params);
  const std::vector<float> sinks = SinkLogits(c);
  params.sinks = SinksOrNull(sinks);
  const SparseInputs sparse(c);
  sparse.Apply(&params);
  validate(params);
  row.tensor_bytes = tensors.Bytes();

  const auto call = [&] {
    if (c.algorithm) forward(params, *c.algorithm); else forward(params);
  };
  TimeLibraryCall(call, options, &row);
  if (c.sparsity != Sparsity::kNone) {  // against the dense call, in place of the OpenBLAS baseline
    const AttentionParams dense = DenseParams(params);
    Row dense_row = row;
    TimeLibraryCall([&] { forward(dense); }, options, &dense_row);
    row.note += (row.note.empty() ? "" : "; ") +
                SparseNote(row.timing.median_ms, dense_row.timing.median_ms, sparse.VisitedFraction());
    return row;
  }

  if (options.baseline && !c.sinks) {  // the OpenBLAS baseline has no sinks
    AttentionParams baseline_params = params;  // same inputs, its own O and LSE
    std::vector<std::uint16_t> o(static_cast<std::size_t>(tensors.OutputSlots()), 0);
    std::vector<float> lse(static_cast<std::size_t>(params.batch * params.heads_q * params.seqlen_q), 0.0f);
    baseline_params.o = o.data();
    baseline_params.lse = lse.data();
    const PrepareBaseline prepare = PrepareWithinScratchLimit<BlasBaseline>(baseline_params, options);
    row.baseline = TimeArrangements(c.threads, options.timing, prepare, &row.note);
    const std::int64_t outputs = params.batch * params.seqlen_q * params.heads_q * params.value_head_dim();
    if (row.baseline)
      row.max_abs_diff_vs_baseline = MaxAbsDiff(params.o, params.dtype, o.data(), params.dtype, outputs);
  }
  return row;
}

}  // namespace flashattn::bench
