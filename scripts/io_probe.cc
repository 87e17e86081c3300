// Driver for scripts/measure_io.sh: one forward call of one algorithm on one head, single-threaded, inside
// io_probe_forward (the only function whose cache misses callgrind collects), after the caches were
// flushed. Prints the modelled and counted traffic of the same call on one line first.
//
//   io_probe ALGORITHM N D [--causal] [--blocks BR BC] [--time REPEATS]
// With --time it runs natively REPEATS times and prints the median and the minimum milliseconds instead
// (the minimum is the robust one on a machine shared with other jobs).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "flashattn/flashattn.h"
#include "io_model/io_model.h"
#include "kernels/fused_forward.h"

extern "C" __attribute__((noinline)) void io_probe_forward(const flashattn::AttentionParams* params,
                                                          flashattn::Algorithm algorithm) {
  flashattn::forward(*params, algorithm);
}

int main(int argc, char** argv) {
  using namespace flashattn;
  if (argc < 4) {
    std::fprintf(stderr, "usage: io_probe ALGORITHM N D [--causal] [--blocks BR BC] [--time REPEATS]\n");
    return 2;
  }
  const Algorithm algorithm = ParseAlgorithm(argv[1]);
  const std::int64_t N = std::atoll(argv[2]), d = std::atoll(argv[3]);
  int repeats = 0;
  AttentionParams p;
  p.seqlen_q = p.seqlen_k = N, p.head_dim = d, p.num_threads = 1;
  for (int a = 4; a < argc; ++a) {
    if (!std::strcmp(argv[a], "--causal")) p.causal = true;
    if (!std::strcmp(argv[a], "--blocks") && a + 2 < argc) {
      p.tiling.block_rows = std::atoll(argv[a + 1]), p.tiling.block_cols = std::atoll(argv[a + 2]);
    }
    if (!std::strcmp(argv[a], "--time") && a + 1 < argc) repeats = std::atoi(argv[a + 1]);
  }
  std::vector<float> q(N * d), k(N * d), v(N * d), o(N * d), lse(N);
  for (std::int64_t i = 0; i < N * d; ++i) q[i] = k[i] = v[i] = static_cast<float>((i * 7919) % 17) / 17.0f;
  p.q = q.data(), p.k = k.data(), p.v = v.data(), p.o = o.data(), p.lse = lse.data();
  p.SetContiguousStrides();

  if (repeats > 0) {
    std::vector<double> ms;
    for (int r = 0; r < repeats; ++r) {
      const auto start = std::chrono::steady_clock::now();
      io_probe_forward(&p, algorithm);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(ms.begin(), ms.end());
    std::printf("median_ms %.3f min_ms %.3f\n", ms[ms.size() / 2], ms.front());
    return 0;
  }
  io_model::Cost model;
  long long counted = -1;
  if (algorithm == Algorithm::kFused) {
    model = io_model::Fused(p);
  } else {
    model = algorithm == Algorithm::kStandard ? io_model::Standard(p) : io_model::Flash2(p);
    const io_model::IoCount io = io_model::RunCounted(p, algorithm);
    counted = io.read_bytes + io.written_bytes;
  }
  std::printf("model_bytes %.0f counted_bytes %lld Br %lld Bc %lld target %s\n", model.Bytes(), counted,
              static_cast<long long>(model.Br), static_cast<long long>(model.Bc),
              kernels::FusedTargetName(kernels::FusedDispatchedTarget()).c_str());
  std::fflush(stdout);
  std::vector<char> flush(std::size_t{64} << 20);  // evict Q, K, V, O from every cache level
  for (std::size_t i = 0; i < flush.size(); i += 64) flush[i] = static_cast<char>(i);
  io_probe_forward(&p, algorithm);
  return flush[4096] == 1 ? 1 : 0;
}
