// Driver for scripts/measure_io.sh and scripts/sweep_blocks.sh: one forward call of one algorithm (float32,
// LSE written) on H heads with T threads (default 1 and 1).
//
//   io_probe ALGORITHM N D [--heads H] [--threads T] [--causal] [--blocks BR BC] [--target NAME] MODE
//   MODE:  (none)        print the model's bytes and the SIMD target on one line, then make the call inside
//                        io_probe_forward, the only code callgrind instruments (run this under valgrind
//                        with --instr-atstart=no: the simulated caches start empty)
//          --report      print the model's and the counted run's bytes on one line (no measured call)
//          --model       print the model's bytes, Br and Bc on one line (no counted run, no call)
//          --time R      make the call R times natively (after one warm-up call) and print the median and
//                        minimum wall-clock ms, the median process CPU ms, and GFLOP/s at the median wall
//                        time and per CPU time, as `flashattn bench` reports cpu_gflops: FLOPs / (median
//                        CPU s / threads), the figure that stays meaningful when other jobs share the cores.
//                        FLOPs = 4·H·N²·D, halved when causal.
// --target restricts the dispatch to one Highway target by name (e.g. AVX2, the widest valgrind runs), so
// that the model and the count take the same panel padding as the measured call.
#include <time.h>

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
#include "simd/targets.h"

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#else
#define CALLGRIND_START_INSTRUMENTATION
#define CALLGRIND_STOP_INSTRUMENTATION
#endif

extern "C" __attribute__((noinline)) void io_probe_forward(const flashattn::AttentionParams* params,
                                                          flashattn::Algorithm algorithm) {
  flashattn::forward(*params, algorithm);
}

namespace {

double ProcessCpuMs() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return 1e3 * static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_nsec);
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

const char* TargetName() {
  using flashattn::simd::TargetName, flashattn::simd::DispatchedTarget;
  static const std::string name = TargetName(DispatchedTarget());
  return name.c_str();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace flashattn;
  if (argc < 4) {
    std::fprintf(stderr, "usage: io_probe ALGORITHM N D [--heads H] [--threads T] [--causal] "
                         "[--blocks BR BC] [--target NAME] [--report | --model | --time REPEATS]\n");
    return 2;
  }
  const Algorithm algorithm = parse_algorithm(argv[1]);
  const std::int64_t N = std::atoll(argv[2]), d = std::atoll(argv[3]);
  int repeats = 0;
  bool report = false, model_only = false;
  AttentionParams p;
  p.seqlen_q = p.seqlen_k = N, p.head_dim = d, p.num_threads = 1;
  for (int a = 4; a < argc; ++a) {
    const std::string arg = argv[a];
    const bool has_value = a + 1 < argc;
    if (arg == "--causal") p.causal = true;
    if (arg == "--report") report = true;
    if (arg == "--model") model_only = true;
    if (arg == "--heads" && has_value) p.heads_q = p.heads_kv = std::atoll(argv[a + 1]);
    if (arg == "--threads" && has_value) p.num_threads = std::atoi(argv[a + 1]);
    if (arg == "--time" && has_value) repeats = std::atoi(argv[a + 1]);
    if (arg == "--blocks" && a + 2 < argc) {
      p.tiling.block_rows = std::atoll(argv[a + 1]), p.tiling.block_cols = std::atoll(argv[a + 2]);
    }
    if (arg == "--target" && has_value) {
      bool found = false;
      for (std::int64_t target : simd::CompiledTargets()) {
        if (simd::TargetName(target) != argv[a + 1]) continue;
        simd::RestrictTargetForTest(target);
        found = true;
      }
      if (!found) {
        std::fprintf(stderr, "io_probe: target %s is not compiled in or not supported here\n", argv[a + 1]);
        return 2;
      }
    }
  }
  const std::int64_t elements = p.heads_q * N * d;
  std::vector<float> q(elements), k(elements), v(elements), o(elements), lse(p.heads_q * N);
  for (std::int64_t i = 0; i < elements; ++i) {
    q[i] = k[i] = v[i] = static_cast<float>((i * 7919) % 17) / 17.0f;
  }
  p.q = q.data(), p.k = k.data(), p.v = v.data(), p.o = o.data(), p.lse = lse.data();
  p.set_contiguous_strides();

  if (repeats > 0) {
    const double flops = 4.0 * static_cast<double>(p.heads_q) * static_cast<double>(N) *
                         static_cast<double>(N) * static_cast<double>(d) * (p.causal ? 0.5 : 1.0);
    io_probe_forward(&p, algorithm);  // warm-up: first touch of the outputs and of the kernel's scratch
    std::vector<double> ms, cpu_ms;
    for (int r = 0; r < repeats; ++r) {
      const double cpu_start = ProcessCpuMs();
      const auto start = std::chrono::steady_clock::now();
      io_probe_forward(&p, algorithm);
      const auto elapsed = std::chrono::steady_clock::now() - start;
      ms.push_back(std::chrono::duration<double, std::milli>(elapsed).count());
      cpu_ms.push_back(ProcessCpuMs() - cpu_start);
    }
    const double median_ms = Median(ms), median_cpu_ms = Median(cpu_ms);
    std::printf("median_ms %.3f min_ms %.3f median_cpu_ms %.3f gflops %.1f cpu_gflops %.1f target %s\n",
                median_ms, *std::min_element(ms.begin(), ms.end()), median_cpu_ms, flops / (median_ms * 1e6),
                flops / (median_cpu_ms / p.num_threads * 1e6), TargetName());
    return 0;
  }
  io_model::Cost model;
  switch (algorithm) {
    case Algorithm::kStandard: model = io_model::Standard(p); break;
    case Algorithm::kFlash1: model = io_model::Flash1(p); break;
    case Algorithm::kFlash2: model = io_model::Flash2(p); break;
    default: model = io_model::Fused(p); break;
  }
  if (report) {
    const io_model::IoCount io = io_model::RunCounted(p, algorithm);
    std::printf("model_bytes %.0f counted_bytes %lld Br %lld Bc %lld target %s\n", model.Bytes(),
                static_cast<long long>(io.read_bytes + io.written_bytes), static_cast<long long>(model.Br),
                static_cast<long long>(model.Bc), TargetName());
    return 0;
  }
  std::printf("model_bytes %.0f Br %lld Bc %lld target %s\n", model.Bytes(),
              static_cast<long long>(model.Br), static_cast<long long>(model.Bc), TargetName());
  if (model_only) return 0;
  std::fflush(stdout);
  // Under `valgrind --tool=callgrind --instr-atstart=no` nothing before this point went through the cache
  // simulator, so the call starts with every simulated cache empty: Q, K, V and O come from memory.
  CALLGRIND_START_INSTRUMENTATION;
  io_probe_forward(&p, algorithm);
  CALLGRIND_STOP_INSTRUMENTATION;
  return 0;
}
