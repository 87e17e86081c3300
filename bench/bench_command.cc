#include "bench/bench_command.h"

#include <omp.h>

#include <algorithm>
#include <iostream>
#include <memory>

#include "bench/fma_peak.h"
#include "bench/report.h"
#include "common/checked.h"

namespace flashattn::bench {

namespace {

// The default sweep: the issue-3 target shape (batch 1, 8 heads, N = 4096, d = 128) with and without the
// causal mask and in all three element types, a shorter d = 64 shape, and a grouped-query one. About a
// minute with the fused kernel on 2 cores (most of it is the baseline).
std::vector<BenchCase> DefaultSweep(int threads, std::optional<Algorithm> algorithm) {
  struct Shape {
    std::int64_t heads, heads_kv, seqlen, headdim;
    bool causal;
    DType dtype;
  };
  const Shape shapes[] = {
      {8, 8, 1024, 64, false, DType::kF32},   {8, 8, 1024, 64, true, DType::kF32},
      {8, 8, 4096, 128, false, DType::kF32},  {8, 8, 4096, 128, true, DType::kF32},
      {8, 8, 4096, 128, false, DType::kF16},  {8, 8, 4096, 128, false, DType::kBF16},
      {8, 2, 2048, 128, true, DType::kF32},
  };
  std::vector<BenchCase> cases;
  for (const Shape& s : shapes) {
    BenchCase c;
    c.heads = s.heads;
    c.heads_kv = s.heads_kv;
    c.seqlen_q = c.seqlen_k = s.seqlen;
    c.headdim = s.headdim;
    c.causal = s.causal;
    c.dtype = s.dtype;
    c.threads = threads;
    c.algorithm = algorithm;
    cases.push_back(c);
  }
  return cases;
}

}  // namespace

std::vector<BenchCase> PlanCases(const BenchOptions& o) {
  if (o.threads < 0) Fail("--threads must be >= 0 (0 = all cores), got ", o.threads);
  const int threads = o.threads > 0 ? o.threads : omp_get_max_threads();
  std::optional<Algorithm> algorithm;
  if (!o.algorithm.empty()) algorithm = ParseAlgorithm(o.algorithm, "--algorithm");
  if (!o.single) return DefaultSweep(threads, algorithm);

  BenchCase c;
  c.mode = ParseMode(o.mode, "--mode");
  c.dtype = ParseDType(o.dtype, "--dtype");
  c.batch = o.batch;
  c.heads = o.heads;
  c.heads_kv = o.heads_kv.value_or(o.heads);
  c.seqlen_q = o.seqlen;
  c.seqlen_k = o.seqlen_k.value_or(o.seqlen);
  c.headdim = o.headdim;
  c.causal = o.causal;
  c.threads = threads;
  c.algorithm = algorithm;
  const auto positive = [](const char* option, std::int64_t value) {
    if (value < 1) Fail(option, " must be >= 1, got ", value);
  };
  positive("--batch", c.batch);
  positive("--heads", c.heads);
  positive("--heads-kv", c.heads_kv);
  positive("--seqlen", c.seqlen_q);
  positive("--seqlen-k", c.seqlen_k);
  positive("--headdim", c.headdim);
  if (c.heads % c.heads_kv != 0)
    Fail("--heads-kv must divide --heads, got --heads ", c.heads, " and --heads-kv ", c.heads_kv);
  if (c.headdim > kMaxHeadDim) Fail("--headdim must be <= ", kMaxHeadDim, ", got ", c.headdim);
  // Each tensor is allocated in full: refuse sizes that cannot be (the library validates the rest).
  const double largest = static_cast<double>(c.batch) * static_cast<double>(std::max(c.seqlen_q, c.seqlen_k)) *
                         static_cast<double>(c.heads) * static_cast<double>(c.headdim) * SizeOf(c.dtype);
  if (largest > 0x1p40)
    Fail("--batch, --seqlen, --seqlen-k, --heads, --headdim: a tensor would need ", largest / 0x1p30, " GiB");
  return {c};
}

void RunBench(const BenchOptions& options, std::ostream& out) {
  if (options.run.timing.repeats < 1) Fail("--repeats must be >= 1, got ", options.run.timing.repeats);
  if (!(options.run.timing.min_time_s >= 0))
    Fail("--min-time must be >= 0 seconds, got ", options.run.timing.min_time_s);
  const std::vector<BenchCase> cases = PlanCases(options);

  const FmaPeak peak = MeasureFmaPeak(cases.front().threads);
  if (!options.json) {
    out << "FMA peak: " << peak.gflops << " GFLOP/s on " << peak.threads << " threads (" << peak.target << "), "
        << peak.cpu_gflops << " per CPU time; times are medians of >= " << options.run.timing.repeats
        << " calls; cpu* columns rate each call by its process CPU time / threads\n";
    PrintTableHeader(out);
  }
  for (const BenchCase& c : cases) {
    Row row;
    switch (c.mode) {
      case Mode::kForward: row = RunForward(c, options.run, peak); break;
    }
    if (options.json) out << ToJson(row) << "\n";
    else PrintTableRow(out, row);
    out.flush();
  }
}

}  // namespace flashattn::bench

namespace flashattn::cli {

void AddBenchCommand(CLI::App& app) {
  auto options = std::make_shared<bench::BenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Time flashattn::forward against an OpenBLAS baseline and the measured FMA peak. Without shape "
               "options it runs a default sweep.");
  bench::BenchOptions& o = *options;
  // Shape options.
  cmd->add_option("--mode", o.mode, "What to time: forward")->capture_default_str();
  cmd->add_option("--batch", o.batch, "Batch size")->capture_default_str();
  cmd->add_option("--heads", o.heads, "Query heads Hq")->capture_default_str();
  cmd->add_option("--heads-kv", o.heads_kv, "Key/value heads Hkv, dividing Hq (default: Hq)");
  cmd->add_option("--seqlen", o.seqlen, "Query length Nq")->capture_default_str();
  cmd->add_option("--seqlen-k", o.seqlen_k, "Key length Nk (default: Nq)");
  cmd->add_option("--headdim", o.headdim, "Head dimension d")->capture_default_str();
  cmd->add_flag("--causal", o.causal, "Causal mask (bottom-right aligned)");
  cmd->add_option("--dtype", o.dtype, "Element type: f32, f16, bf16")->capture_default_str();
  // Options for the single configuration and the sweep alike.
  cmd->add_option("--threads", o.threads, "Threads for the kernel, the baseline and the peak (0 = all cores)")
      ->capture_default_str();
  cmd->add_option("--algorithm", o.algorithm,
                  "Algorithm passed to flashattn::forward (default: forward's own default)");
  cmd->add_flag("--json", o.json, "One JSON object per line instead of a table");
  cmd->add_option("--repeats", o.run.timing.repeats, "At least this many timed calls per measurement")
      ->capture_default_str();
  cmd->add_option("--min-time", o.run.timing.min_time_s, "And at least this many seconds of timed calls")
      ->capture_default_str();
  cmd->add_flag("--report-memory", o.run.report_memory,
                "Report the peak resident memory growth of the first call (Linux VmHWM)");
  cmd->add_flag("--no-baseline", [&o](std::int64_t) { o.run.baseline = false; }, "Skip the OpenBLAS baseline");
  cmd->callback([cmd, options] {
    for (const char* shape_option :
         {"--mode", "--batch", "--heads", "--heads-kv", "--seqlen", "--seqlen-k", "--headdim", "--causal", "--dtype"})
      if (cmd->count(shape_option) > 0) options->single = true;
    bench::RunBench(*options, std::cout);
  });
}

}  // namespace flashattn::cli
