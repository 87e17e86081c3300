// flashattn demo, the main job: one workload through every algorithm, each checked against the float64
// oracle on sampled rows, with its time, throughput and the extra memory it needed — the story of
// docs/algorithms.md (standard materializes the N×N scores, FlashAttention does not) measured on this machine.
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.h"
#include "flashattn/flashattn.h"
#include "measure/measure.h"
#include "support/oracle.h"

namespace flashattn::cli {
namespace {

struct DemoOptions {
  std::int64_t batch = 1, heads = 8, seqlen = 2048, headdim = 128;
  bool causal = true;
  int threads = 0;
  std::int64_t rows_per_head = 16;  // query rows per (batch, head) that the oracle recomputes
  std::uint64_t seed = 1;
  double tolerance = 1e-4;
};

// Q, K, V drawn from N(0, 1) in flash-attn's layout (batch, seqlen, heads, dim), and the outputs.
struct Workload {
  AttentionParams params;
  std::vector<float> Q, K, V, O, lse;
};

std::unique_ptr<Workload> MakeWorkload(const DemoOptions& o) {
  auto w = std::make_unique<Workload>();
  AttentionParams& p = w->params;
  p.batch = o.batch;
  p.seqlen_q = p.seqlen_k = o.seqlen;
  p.heads_q = p.heads_kv = o.heads;
  p.head_dim = o.headdim;
  p.causal = o.causal;
  p.num_threads = o.threads;
  p.set_contiguous_strides();
  const std::int64_t elements = o.batch * o.seqlen * o.heads * o.headdim;  // sizes checked by the caller
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<float> normal;
  for (std::vector<float>* x : {&w->Q, &w->K, &w->V}) {
    x->resize(static_cast<std::size_t>(elements));
    for (float& value : *x) value = normal(rng);
  }
  w->O.resize(static_cast<std::size_t>(elements));
  w->lse.resize(static_cast<std::size_t>(o.batch * o.heads * o.seqlen));
  p.q = w->Q.data();
  p.k = w->K.data();
  p.v = w->V.data();
  p.o = w->O.data();
  p.lse = w->lse.data();
  validate(p);
  return w;
}

// The oracle's O and LSE for one query row.
struct Sample {
  std::int64_t b, h, i;
  std::vector<double> o;
  double lse;
};

// Rows 0 and Nq − 1 of every (batch, head) (the least and the most keys under the causal mask), and
// further rows drawn at random.
std::vector<Sample> SampleOracle(const AttentionParams& p, const DemoOptions& o) {
  std::vector<Sample> samples;
  if (p.seqlen_q == 0) return samples;
  std::mt19937_64 rng(o.seed + 1);
  std::uniform_int_distribution<std::int64_t> row(0, p.seqlen_q - 1);
  for (std::int64_t b = 0; b < p.batch; ++b) {
    for (std::int64_t h = 0; h < p.heads_q; ++h) {
      std::vector<std::int64_t> rows = {0, p.seqlen_q - 1};
      while (static_cast<std::int64_t>(rows.size()) < o.rows_per_head) rows.push_back(row(rng));
      rows.resize(static_cast<std::size_t>(std::min<std::int64_t>(o.rows_per_head, p.seqlen_q)));
      for (std::int64_t i : rows) {
        support::OracleRows ref = support::OracleHeadRows(p, b, h, i, i + 1);
        samples.push_back({b, h, i, std::move(ref.o), ref.lse[0]});
      }
    }
  }
  return samples;
}

struct Errors {
  double o_error = 0.0;    // max |O − O_ref| / max |O_ref| over the sampled rows
  double lse_error = 0.0;  // max |LSE − LSE_ref| / max(1, |LSE_ref|)
};

Errors CompareSamples(const Workload& w, const std::vector<Sample>& samples) {
  const AttentionParams& p = w.params;
  const std::int64_t dv = p.value_head_dim();
  double max_diff = 0.0, max_ref = 0.0;
  Errors errors;
  for (const Sample& s : samples) {
    const float* O_i = w.O.data() + s.b * p.o_strides.batch + s.i * p.o_strides.seq + s.h * p.o_strides.head;
    for (std::int64_t c = 0; c < dv; ++c) {
      const double diff = std::abs(static_cast<double>(O_i[c]) - s.o[c]);
      max_diff = std::isnan(diff) ? std::numeric_limits<double>::infinity() : std::max(max_diff, diff);
      max_ref = std::max(max_ref, std::abs(s.o[c]));
    }
    const double lse = w.lse[(s.b * p.heads_q + s.h) * p.seqlen_q + s.i];
    if (std::isinf(s.lse) && lse == s.lse) continue;  // both −∞: a row that sees no key
    const double lse_diff = std::abs(lse - s.lse) / std::max(1.0, std::abs(s.lse));
    errors.lse_error = std::isnan(lse_diff) || std::isinf(lse_diff) ? std::numeric_limits<double>::infinity()
                                                                    : std::max(errors.lse_error, lse_diff);
  }
  errors.o_error = max_ref > 0.0 ? max_diff / max_ref : max_diff;
  return errors;
}

struct Measurement {
  double ms = 0.0;
  std::optional<std::int64_t> extra_bytes;
  Errors errors;
};

Measurement Measure(Workload& w, Algorithm algorithm, const std::vector<Sample>& samples) {
  // Outputs pre-filled (and so resident) with NaN: a row an algorithm forgot shows up as an error.
  std::fill(w.O.begin(), w.O.end(), std::numeric_limits<float>::quiet_NaN());
  std::fill(w.lse.begin(), w.lse.end(), std::numeric_limits<float>::quiet_NaN());
  // Free heap pages go back to the kernel first, so that an algorithm reusing memory an earlier one freed
  // still shows its scratch as growth.
  malloc_trim(0);
  Measurement m;
  const measure::PeakRssProbe probe;
  const auto start = std::chrono::steady_clock::now();
  forward(w.params, algorithm);
  const auto stop = std::chrono::steady_clock::now();
  m.ms = std::chrono::duration<double, std::milli>(stop - start).count();
  if (probe.available()) m.extra_bytes = probe.PeakGrowthBytes();
  m.errors = CompareSamples(w, samples);
  return m;
}

// Starts the thread pool with a tiny call, so that creating the worker threads (their stacks) is not counted
// as the first algorithm's memory.
void WarmUpThreads(int threads) {
  std::vector<float> q(16, 1.0f), k(16, 1.0f), v(16, 1.0f), o(16);  // 2 problems of one row, d = 8
  AttentionParams p;
  p.batch = 2;
  p.seqlen_q = p.seqlen_k = 1;
  p.head_dim = 8;
  p.num_threads = threads;
  p.set_contiguous_strides();
  p.q = q.data();
  p.k = k.data();
  p.v = v.data();
  p.o = o.data();
  forward(p, Algorithm::kFlash2);
}

void PrintIntroduction(const DemoOptions& o, std::int64_t samples) {
  std::printf(
      "flashattn demo: batch %lld, %lld heads, %lld tokens, head dim %lld, %s, float32, threads %d (0 = "
      "all)\n\n",
      static_cast<long long>(o.batch), static_cast<long long>(o.heads), static_cast<long long>(o.seqlen),
      static_cast<long long>(o.headdim), o.causal ? "causal" : "not causal", o.threads);
  std::printf(
      "Each algorithm computes O = softmax(Q K^T / sqrt(d)) V for every head. 'standard' writes the whole\n"
      "N x N score matrix S and probability matrix P of a head to main memory; 'flash1' and 'flash2' stream\n"
      "K/V in tiles and carry each row's running max m and sum l (the online softmax), so they never hold\n"
      "more than one tile of scores; 'fused' is the library's fast kernel, flash2's loop order with SIMD "
      "tiles\n"
      "sized to the caches.\n"
      "  time         one call, wall clock\n"
      "  GFLOP/s      4*b*h*N*N*d%s / time\n"
      "  extra memory growth of the process's peak resident memory (VmHWM) during the call: the scratch the\n"
      "               algorithm had in use at once (two N x N matrices per thread for standard, tiles "
      "otherwise)\n"
      "  max error    max|O - O_oracle| / max|O_oracle|, over %lld rows recomputed in float64\n"
      "  LSE error    max|LSE - LSE_oracle| / max(1, |LSE_oracle|), same rows\n\n",
      o.causal ? " / 2 (causal)" : "", static_cast<long long>(samples));
}

void Demo(const DemoOptions& o) {
  const std::pair<const char*, std::int64_t> sizes[] = {
      {"--batch", o.batch}, {"--heads", o.heads}, {"--seqlen", o.seqlen}, {"--headdim", o.headdim}};
  for (auto [name, value] : sizes) {
    if (value < 1)
      throw std::runtime_error(std::string(name) + ": must be >= 1, got " + std::to_string(value));
  }
  if (o.headdim > kMaxHeadDim) {
    throw std::runtime_error("--headdim: must be <= " + std::to_string(kMaxHeadDim) + ", got " +
                             std::to_string(o.headdim));
  }
  if (o.threads < 0)
    throw std::runtime_error("--threads: must be >= 0 (0 = all cores), got " + std::to_string(o.threads));
  if (o.rows_per_head < 1) {
    throw std::runtime_error("--rows: must be >= 1, got " + std::to_string(o.rows_per_head));
  }
  if (o.batch * o.seqlen * o.heads * o.headdim > (std::int64_t{1} << 30)) {
    throw std::runtime_error(
        "--batch, --seqlen, --heads, --headdim: the workload holds more than 2^30 elements "
        "per tensor");
  }

  std::unique_ptr<Workload> w = MakeWorkload(o);
  WarmUpThreads(o.threads);
  const std::vector<Sample> samples = SampleOracle(w->params, o);
  PrintIntroduction(o, static_cast<std::int64_t>(samples.size()));
  const double flops = 4.0 * o.batch * o.heads * o.seqlen * o.seqlen * o.headdim * (o.causal ? 0.5 : 1.0);

  std::printf("%-10s %12s %10s %20s %12s %12s\n", "algorithm", "time (ms)", "GFLOP/s", "extra memory (MiB)",
              "max error", "LSE error");
  std::vector<std::string> failures;
  for (Algorithm algorithm : kAllAlgorithms) {
    if (algorithm == Algorithm::kOracle) continue;
    const Measurement m = Measure(*w, algorithm, samples);
    char memory[32] = "n/a";
    if (m.extra_bytes) std::snprintf(memory, sizeof(memory), "%.2f", *m.extra_bytes / (1024.0 * 1024.0));
    std::printf("%-10s %12.1f %10.2f %20s %12.2e %12.2e\n", std::string(to_string(algorithm)).c_str(), m.ms,
                flops / (m.ms * 1e6), memory, m.errors.o_error, m.errors.lse_error);
    std::fflush(stdout);
    if (!(m.errors.o_error <= o.tolerance && m.errors.lse_error <= o.tolerance)) {
      std::ostringstream failure;
      failure << to_string(algorithm) << " (max error " << m.errors.o_error << ", LSE error "
              << m.errors.lse_error << ")";
      failures.push_back(failure.str());
    }
  }
  if (!failures.empty()) {
    std::string list;
    for (const std::string& f : failures) list += (list.empty() ? "" : ", ") + f;
    throw std::runtime_error("demo: differs from the float64 oracle by more than " +
                             std::to_string(o.tolerance) + ": " + list);
  }
}

}  // namespace

void AddDemoCommand(CLI::App& app) {
  auto o = std::make_shared<DemoOptions>();
  CLI::App* demo = app.add_subcommand("demo",
                                      "Run every algorithm on one workload, check each against the "
                                      "float64 oracle, and print time, GFLOP/s, memory and error");
  demo->add_option("--batch", o->batch, "Batch size")->capture_default_str();
  demo->add_option("--heads", o->heads, "Attention heads")->capture_default_str();
  demo->add_option("--seqlen", o->seqlen, "Tokens per sequence (Nq = Nk)")->capture_default_str();
  demo->add_option("--headdim", o->headdim, "Head dimension d")->capture_default_str();
  demo->add_flag("--causal,!--no-causal", o->causal, "Causal mask (default) or none");
  demo->add_option("--threads", o->threads, "Threads (0 = all cores)")->capture_default_str();
  demo->add_option("--rows", o->rows_per_head, "Query rows per head checked against the oracle")
      ->capture_default_str();
  demo->add_option("--seed", o->seed, "Seed of the random Q, K, V")->capture_default_str();
  demo->add_option("--tolerance", o->tolerance, "Largest accepted error against the oracle")
      ->capture_default_str();
  demo->callback([o] { Demo(*o); });
}

}  // namespace flashattn::cli
