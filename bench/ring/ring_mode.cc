// --mode ring: ring_forward and ring_backward on the given shape, timed per rank and step, compared with
// one process on the whole sequence (timed on rank 0 while the other ranks sleep) and checked against it.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "flashattn/backward.h"
#include "flashattn/distributed.h"
#include "flashattn/flashattn.h"
#include "ring/ring_bench.h"
#include "ring/ring_data.h"
#include "ring/ring_report.h"

namespace flashattn::ring_bench {
namespace {

enum TensorId { kQ, kK, kV, kDo };

// The attention call of the options over q, k, v rows (a shard or the whole sequence).
AttentionParams Call(const Options& o, Tensor& q, Tensor& k, Tensor& v, Tensor& out, float* lse, int threads) {
  AttentionParams p;
  p.q = q.data(), p.k = k.data(), p.v = v.data(), p.o = out.data(), p.lse = lse;
  p.batch = o.batch, p.seqlen_q = q.seq, p.seqlen_k = k.seq;
  p.heads_q = o.heads, p.heads_kv = o.HeadsKv(), p.head_dim = o.head_dim;
  p.dtype = o.Dtype();
  p.causal = o.causal, p.window_left = o.window_left, p.window_right = o.window_right;
  p.num_threads = threads;
  p.set_contiguous_strides();
  return p;
}

BackwardParams Backward(const AttentionParams& attention, Tensor& d_o, Tensor& dq, Tensor& dk, Tensor& dv) {
  BackwardParams b;
  b.attention = attention;
  b.d_o = d_o.data(), b.dq = dq.data(), b.dk = dk.data(), b.dv = dv.data();
  b.set_contiguous_strides();
  return b;
}

// The tensors of one set of rows (a rank's shard or the whole sequence).
struct Rows {
  std::vector<std::int64_t> positions;
  Tensor q, k, v, d_o, o, dq, dk, dv;
  std::vector<float> lse;

  Rows(const Options& options, std::vector<std::int64_t> rows) : positions(std::move(rows)) {
    const DType dtype = options.Dtype();
    const std::int64_t B = options.batch, H = options.heads, Hkv = options.HeadsKv(), d = options.head_dim;
    const std::int64_t n = static_cast<std::int64_t>(positions.size());
    q = MakeRows(kQ, positions, B, H, d, dtype);
    k = MakeRows(kK, positions, B, Hkv, d, dtype);
    v = MakeRows(kV, positions, B, Hkv, d, dtype);
    d_o = MakeRows(kDo, positions, B, H, d, dtype);
    o = Tensor(B, n, H, d, dtype);
    dq = Tensor(B, n, H, d, dtype);
    dk = Tensor(B, n, Hkv, d, dtype);
    dv = Tensor(B, n, Hkv, d, dtype);
    lse.assign(static_cast<std::size_t>(B * H * n), 0.0f);
  }
};

// Score pairs a row sees, summed over the sequence: the forward pass costs 2·(d + dv) FLOP per pair and
// head, the backward pass 2.5 times that (its five matrix products against the forward's two).
double ForwardFlops(const Options& o) {
  double pairs = 0;
  const std::int64_t N = o.seqlen;
  const std::int64_t right = o.causal ? 0 : o.window_right;
  for (std::int64_t p = 0; p < N; ++p) {
    const std::int64_t lo = o.window_left >= 0 ? std::max<std::int64_t>(0, p - o.window_left) : 0;
    const std::int64_t hi = right >= 0 ? std::min(N - 1, p + right) : N - 1;
    pairs += static_cast<double>(hi - lo + 1);
  }
  return 2.0 * static_cast<double>(o.batch * o.heads * 2 * o.head_dim) * pairs;
}

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// "name: error x (limit y) ok|FAILED", for the report and the exit status.
std::string Check(const char* name, double error, double limit, bool* all_ok) {
  char line[160];
  std::snprintf(line, sizeof line, "%s: relative error %.3g (limit %.3g) %s", name, error, limit,
                error <= limit ? "ok" : "FAILED");
  *all_ok = *all_ok && error <= limit;
  return line;
}

}  // namespace

int RunRing(const Options& o) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const distributed::ShardLayout layout = distributed::parse_layout(o.layout, "--layout");
  Rows shard(o, distributed::shard_indices(o.seqlen, world, rank, layout));

  distributed::RingParams forward_params;
  forward_params.local = Call(o, shard.q, shard.k, shard.v, shard.o, shard.lse.data(), o.threads);
  forward_params.seqlen = o.seqlen;
  forward_params.layout = layout;
  distributed::RingBackwardParams backward_params;
  backward_params.local = Backward(forward_params.local, shard.d_o, shard.dq, shard.dk, shard.dv);
  backward_params.seqlen = o.seqlen;
  backward_params.layout = layout;

  std::vector<PassReport> passes;
  passes.push_back(TimeRingPass(
      "forward", [&] { distributed::ring_forward(forward_params, MPI_COMM_WORLD); }, o.repeats));
  passes.back().flops = ForwardFlops(o);
  if (o.backward) {
    passes.push_back(TimeRingPass(
        "backward", [&] { distributed::ring_backward(backward_params, MPI_COMM_WORLD); }, o.repeats));
    passes.back().flops = 2.5 * ForwardFlops(o);
  }

  // Gathered outputs, then one process on the whole sequence (rank 0; the others sleep meanwhile).
  std::vector<std::string> checks;
  bool all_ok = true;
  if (o.check || o.compare) {
    const Tensor o_ring = GatherRows(shard.o, shard.positions, o.seqlen);
    const std::vector<float> lse_ring = GatherLse(shard.lse, o.batch, o.heads, shard.positions, o.seqlen);
    const Tensor dq_ring = GatherRows(shard.dq, shard.positions, o.seqlen);
    const Tensor dk_ring = GatherRows(shard.dk, shard.positions, o.seqlen);
    const Tensor dv_ring = GatherRows(shard.dv, shard.positions, o.seqlen);
    if (rank == 0) {
      Rows whole(o, Positions(0, o.seqlen));
      const int threads = o.single_threads > 0 ? o.single_threads : o.threads * world;
      const AttentionParams call = Call(o, whole.q, whole.k, whole.v, whole.o, whole.lse.data(), threads);
      const BackwardParams backward_call = Backward(call, whole.d_o, whole.dq, whole.dk, whole.dv);
      std::vector<double> forward_times, backward_times;
      for (int run = 0; run <= (o.compare ? o.repeats : 0); ++run) {
        auto start = std::chrono::steady_clock::now();
        forward(call);
        if (run > 0) forward_times.push_back(Seconds(start));
        if (!o.backward) continue;
        start = std::chrono::steady_clock::now();
        backward(backward_call);
        if (run > 0) backward_times.push_back(Seconds(start));
      }
      if (o.compare) {
        passes[0].single_seconds = Median(forward_times);
        if (o.backward) passes[1].single_seconds = Median(backward_times);
      }
      if (o.check) {
        // One process rounds once, the ring once: they differ by about a unit in the last place.
        const double limit = o.Dtype() == DType::kF32 ? 1e-4 : o.Dtype() == DType::kF16 ? 4e-3 : 3e-2;
        checks.push_back(Check("O", RelativeError(o_ring, whole.o), limit, &all_ok));
        checks.push_back(Check("LSE", RelativeError(lse_ring, whole.lse), 1e-4, &all_ok));
        if (o.backward) {
          checks.push_back(Check("dQ", RelativeError(dq_ring, whole.dq), limit, &all_ok));
          checks.push_back(Check("dK", RelativeError(dk_ring, whole.dk), limit, &all_ok));
          checks.push_back(Check("dV", RelativeError(dv_ring, whole.dv), limit, &all_ok));
        }
      }
    }
    StartTogether(MPI_COMM_WORLD);
  }

  if (rank == 0) {
    std::printf(
        "flashattn-ring: W=%d ranks x %d threads, batch %lld, N %lld, Hq %lld, Hkv %lld, d %lld, %s, %s%s, "
        "window (%lld, %lld)\n",
        world, o.threads, static_cast<long long>(o.batch), static_cast<long long>(o.seqlen),
        static_cast<long long>(o.heads), static_cast<long long>(o.HeadsKv()), static_cast<long long>(o.head_dim),
        o.dtype.c_str(), o.layout.c_str(), o.causal ? ", causal" : "", static_cast<long long>(o.window_left),
        static_cast<long long>(o.window_right));
    for (const PassReport& pass : passes) PrintPass(pass);
    std::printf("\n");
    for (const std::string& check : checks) std::printf("check %s\n", check.c_str());
    if (!o.json.empty()) WriteJson(o.json, o, world, passes, checks);
  }
  int status = all_ok ? 0 : 1;
  MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return status;
}

}  // namespace flashattn::ring_bench
