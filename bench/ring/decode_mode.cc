// --mode decode: sharded_decode over a cache split in W consecutive parts, against each rank's decode of
// its own part alone (the slowest of those is what the gather and merge add to), and checked against one
// process decoding the whole cache.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "flashattn/decode.h"
#include "flashattn/distributed.h"
#include "flashattn/flashattn.h"
#include "ring/ring_bench.h"
#include "ring/ring_data.h"
#include "ring/ring_report.h"

namespace flashattn::ring_bench {
namespace {

enum TensorId { kQ = 10, kK, kV };

// A decode call over keys [begin, end) of every sequence, with its own cache and outputs.
struct DecodeShard {
  Tensor q, k_cache, v_cache, o;
  std::vector<float> lse;
  std::vector<std::int32_t> cache_seqlens;
  DecodeParams params;

  DecodeShard(const Options& options, std::int64_t begin, std::int64_t end, int threads) {
    const DType dtype = options.Dtype();
    const std::int64_t B = options.batch, Hq = options.heads, Hkv = options.HeadsKv(), d = options.head_dim;
    const std::int64_t Nq = options.seqlen_q;
    q = MakeRows(kQ, Positions(options.cache_len - Nq, options.cache_len), B, Hq, d, dtype);
    k_cache = MakeRows(kK, Positions(begin, end), B, Hkv, d, dtype);
    v_cache = MakeRows(kV, Positions(begin, end), B, Hkv, d, dtype);
    o = Tensor(B, Nq, Hq, d, dtype);
    lse.assign(static_cast<std::size_t>(B * Hq * Nq), 0.0f);
    cache_seqlens.assign(static_cast<std::size_t>(B), static_cast<std::int32_t>(end - begin));
    params.q = q.data(), params.k_cache = k_cache.data(), params.v_cache = v_cache.data();
    params.o = o.data(), params.lse = lse.data(), params.cache_seqlens = cache_seqlens.data();
    params.batch = B, params.seqlen_q = Nq, params.heads_q = Hq, params.heads_kv = Hkv, params.head_dim = d;
    params.dtype = params.cache_dtype = dtype;
    params.cache_seqlen_max = end - begin;
    params.causal = options.causal, params.window_left = options.window_left;
    params.window_right = options.window_right;
    params.num_splits = options.num_splits;
    params.num_threads = threads;
    params.set_contiguous_strides();
  }
};

// Median over `repeats` calls (after a warm-up) of the slowest rank's time for `call`.
double TimeSlowest(const std::function<void()>& call, int repeats) {
  std::vector<double> samples;
  for (int run = 0; run <= repeats; ++run) {
    StartTogether(MPI_COMM_WORLD);
    const auto start = std::chrono::steady_clock::now();
    call();
    double mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), slowest = 0;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (run > 0) samples.push_back(slowest);
  }
  return Median(samples);
}

}  // namespace

int RunDecode(const Options& o) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const std::int64_t begin = o.cache_len * rank / world, end = o.cache_len * (rank + 1) / world;
  DecodeShard shard(o, begin, end, o.threads);
  const int repeats = std::max(o.repeats, 20);
  const double local = TimeSlowest([&] { decode(shard.params); }, repeats);
  const double sharded = TimeSlowest([&] { distributed::sharded_decode(shard.params, MPI_COMM_WORLD); }, repeats);

  int status = 0;
  if (rank == 0) {
    std::printf(
        "flashattn-ring decode: W=%d ranks x %d threads, batch %lld, cache %lld keys (%lld per rank), "
        "Nq %lld, Hq %lld, Hkv %lld, d %lld, %s\n",
        world, o.threads, static_cast<long long>(o.batch), static_cast<long long>(o.cache_len),
        static_cast<long long>(end - begin), static_cast<long long>(o.seqlen_q), static_cast<long long>(o.heads),
        static_cast<long long>(o.HeadsKv()), static_cast<long long>(o.head_dim), o.dtype.c_str());
    std::printf(
        "  slowest rank's local decode: %.3f ms\n  sharded_decode (decode + gather + merge): %.3f ms\n"
        "  gather and merge add %.3f ms = %.1f%% of the local decode\n",
        1e3 * local, 1e3 * sharded, 1e3 * (sharded - local), 100.0 * (sharded - local) / local);
  }
  if (o.check) {
    const Tensor merged = shard.o;  // from the last sharded_decode
    if (rank == 0) {
      DecodeShard whole(o, 0, o.cache_len, o.threads * world);
      decode(whole.params);
      const double limit = o.Dtype() == DType::kF32 ? 1e-4 : o.Dtype() == DType::kF16 ? 4e-3 : 3e-2;
      const double error = RelativeError(merged, whole.o);
      std::printf("check O: relative error %.3g (limit %.3g) %s\n", error, limit, error <= limit ? "ok" : "FAILED");
      status = error <= limit ? 0 : 1;
    }
    StartTogether(MPI_COMM_WORLD);
  }
  MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return status;
}

}  // namespace flashattn::ring_bench
