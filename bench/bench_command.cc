#include "bench/bench_command.h"

#include <CLI/CLI.hpp>
#include <omp.h>

#include <algorithm>
#include <iostream>
#include <memory>

#include "bench/blas_core.h"
#include "bench/modes.h"
#include "bench/report.h"
#include "support/fail.h"

namespace flashattn::bench {

namespace {

constexpr std::int64_t kDefaultSeqlen = 4096, kDefaultCacheLen = 32768;

// The default sweep (the shapes of docs/performance.md): the forward target shape (batch 1, 8 heads,
// N = 4096, d = 128) with and without the causal mask and in all three element types, a shorter d = 64
// shape, a grouped-query one; the decode targets (f16 cache of 32 query heads on 8 K/V heads over 32768
// keys, its f32 cache, and one K/V head over 131072 keys); the backward target (N = 2048, full and causal).
// About two and a half minutes on 2 quiet cores, most of it in the baselines.
std::vector<BenchCase> DefaultSweep(int threads, std::optional<Algorithm> algorithm) {
  struct Shape {
    Mode mode;
    std::int64_t heads, heads_kv, seqlen_q, seqlen_k, headdim;
    bool causal;
    DType dtype;
  };
  const Shape shapes[] = {
      {Mode::kForward, 8, 8, 1024, 1024, 64, false, DType::kF32},
      {Mode::kForward, 8, 8, 1024, 1024, 64, true, DType::kF32},
      {Mode::kForward, 8, 8, 4096, 4096, 128, false, DType::kF32},
      {Mode::kForward, 8, 8, 4096, 4096, 128, true, DType::kF32},
      {Mode::kForward, 8, 8, 4096, 4096, 128, false, DType::kF16},
      {Mode::kForward, 8, 8, 4096, 4096, 128, false, DType::kBF16},
      {Mode::kForward, 8, 2, 2048, 2048, 128, true, DType::kF32},
      {Mode::kDecode, 32, 8, 1, 32768, 128, false, DType::kF16},
      {Mode::kDecode, 32, 8, 1, 32768, 128, false, DType::kF32},
      {Mode::kDecode, 8, 1, 1, 131072, 128, false, DType::kF16},
      {Mode::kBackward, 8, 8, 2048, 2048, 128, false, DType::kF32},
      {Mode::kBackward, 8, 8, 2048, 2048, 128, true, DType::kF32},
  };
  std::vector<BenchCase> cases;
  for (const Shape& s : shapes) {
    cases.push_back({.mode = s.mode, .heads = s.heads, .heads_kv = s.heads_kv, .seqlen_q = s.seqlen_q,
                     .seqlen_k = s.seqlen_k, .headdim = s.headdim, .headdim_v = std::nullopt, .causal = s.causal,
                     .dtype = s.dtype, .threads = threads,
                     .algorithm = s.mode == Mode::kForward ? algorithm : std::nullopt});
  }
  return cases;
}

}  // namespace

std::vector<BenchCase> PlanCases(const BenchOptions& o) {
  if (o.threads < 0) support::Fail("--threads must be >= 0 (0 = all cores), got ", o.threads);
  const int threads = o.threads > 0 ? o.threads : omp_get_max_threads();
  std::optional<Algorithm> algorithm;
  if (!o.algorithm.empty()) algorithm = parse_algorithm(o.algorithm, "--algorithm");
  if (!o.single) return DefaultSweep(threads, algorithm);

  BenchCase c;
  c.mode = ParseMode(o.mode, "--mode");
  c.dtype = ParseDType(o.dtype, "--dtype");
  c.batch = o.batch;
  c.heads = o.heads;
  c.heads_kv = o.heads_kv.value_or(o.heads);
  c.headdim = o.headdim;
  c.headdim_v = o.headdim_v;
  c.sinks = o.sinks;
  c.causal = o.causal;
  c.threads = threads;
  const auto positive = [](const char* option, std::int64_t value) {
    if (value < 1) support::Fail(option, " must be >= 1, got ", value);
  };
  const auto only_for = [&](const char* option, bool given, Mode mode) {
    if (given && c.mode != mode)
      support::Fail(option, " applies to --mode ", ToString(mode), " only, got --mode ", o.mode);
  };
  only_for("--algorithm", algorithm.has_value(), Mode::kForward);
  only_for("--cache-len", o.cache_len.has_value(), Mode::kDecode);
  only_for("--num-splits", o.num_splits.has_value(), Mode::kDecode);
  only_for("--paged", o.paged.has_value(), Mode::kDecode);
  only_for("--cache-dtype", !o.cache_dtype.empty(), Mode::kDecode);
  if (!o.cache_dtype.empty()) c.cache_element = ParseCacheElement(o.cache_dtype, "--cache-dtype");
  if (o.quantize_query && c.cache_element != CacheElement::kInt8) {
    support::Fail("--quantize-query applies to --mode decode --cache-dtype int8, got --cache-dtype ",
                  o.cache_dtype.empty() ? std::string("(none)") : o.cache_dtype);
  }
  c.quantize_query = o.quantize_query;
  if (o.quantize_probs && c.cache_element != CacheElement::kInt8) {
    support::Fail("--quantize-probs applies to --mode decode --cache-dtype int8, got --cache-dtype ",
                  o.cache_dtype.empty() ? std::string("(none)") : o.cache_dtype);
  }
  c.quantize_probs = o.quantize_probs;
  if (o.scale_group_size) {
    if (c.cache_element == CacheElement::kFloat) {
      support::Fail("--scale-group-size applies to --mode decode with --cache-dtype int8 or fp8_e4m3");
    }
    if (*o.scale_group_size <= 0 || o.headdim % *o.scale_group_size != 0) {
      support::Fail("--scale-group-size must divide --headdim (", o.headdim, "), got ", *o.scale_group_size);
    }
    c.scale_group_size = *o.scale_group_size;
  }
  if (c.mode == Mode::kDecode) {
    if (o.seqlen_k) support::Fail("--seqlen-k does not apply to --mode decode (use --cache-len), got ", *o.seqlen_k);
    c.seqlen_q = o.seqlen.value_or(1);
    c.seqlen_k = o.cache_len.value_or(kDefaultCacheLen);
    c.num_splits = o.num_splits.value_or(0);
    c.page_size = o.paged.value_or(0);
    positive("--cache-len", c.seqlen_k);
    if (c.seqlen_k > std::int64_t{0x7fffffff}) support::Fail("--cache-len must fit in int32, got ", c.seqlen_k);
    if (c.num_splits < 0) support::Fail("--num-splits must be >= 0 (0 = heuristic), got ", c.num_splits);
    if (o.paged) positive("--paged", c.page_size);
  } else {
    c.seqlen_q = o.seqlen.value_or(kDefaultSeqlen);
    c.seqlen_k = o.seqlen_k.value_or(c.seqlen_q);
    c.algorithm = algorithm;
  }
  positive("--batch", c.batch);
  positive("--heads", c.heads);
  positive("--heads-kv", c.heads_kv);
  positive("--seqlen", c.seqlen_q);
  positive("--seqlen-k", c.seqlen_k);
  positive("--headdim", c.headdim);
  if (c.heads % c.heads_kv != 0)
    support::Fail("--heads-kv must divide --heads, got --heads ", c.heads, " and --heads-kv ", c.heads_kv);
  if (c.headdim > kMaxHeadDim) support::Fail("--headdim must be <= ", kMaxHeadDim, ", got ", c.headdim);
  if (c.headdim_v) {
    positive("--headdim-v", *c.headdim_v);
    const std::int64_t limit = c.mode == Mode::kDecode ? c.headdim : kMaxHeadDim;  // decode: V inside K
    if (*c.headdim_v > limit) {
      support::Fail("--headdim-v must be <= ", limit, c.mode == Mode::kDecode ? " (--headdim: decode reads V inside K)" : "",
                    ", got ", *c.headdim_v);
    }
  }
  // Each tensor is allocated in full: refuse sizes that cannot be (the library validates the rest).
  const double largest = static_cast<double>(c.batch) *
                         static_cast<double>(std::max(c.seqlen_q, c.seqlen_k)) *
                         static_cast<double>(c.heads) * static_cast<double>(c.headdim) * size_of(c.dtype);
  if (largest > 0x1p40)
    support::Fail("--batch, --seqlen, --seqlen-k, --cache-len, --heads, --headdim: a tensor would need ",
         largest / 0x1p30, " GiB");
  return {c};
}

void RunBench(const BenchOptions& options, std::ostream& out) {
  if (options.run.timing.repeats < 1) support::Fail("--repeats must be >= 1, got ", options.run.timing.repeats);
  if (!(options.run.timing.min_time_s >= 0))
    support::Fail("--min-time must be >= 0 seconds, got ", options.run.timing.min_time_s);
  const std::vector<BenchCase> cases = PlanCases(options);

  Limits limits;
  limits.peak = measure::MeasureFmaPeak(cases.front().threads);
  RunOptions run = options.run;
  if (std::any_of(cases.begin(), cases.end(), [](const BenchCase& c) { return c.mode == Mode::kDecode; })) {
    const std::int64_t main_memory_bytes = measure::MainMemoryBytes();
    limits.bandwidth = measure::MeasureBandwidth(cases.front().threads, main_memory_bytes);
    if (!options.warm_cache)
      run.evictor = std::make_shared<measure::CacheEvictor>(main_memory_bytes, cases.front().threads);
  }
  if (!options.json) {
    out << "FMA peak: " << limits.peak.gflops << " GFLOP/s on " << limits.peak.threads << " threads ("
        << limits.peak.target << "), " << limits.peak.cpu_gflops << " per CPU time";
    if (limits.bandwidth) {
      out << "; memory bandwidth: read " << limits.bandwidth->read_gbs << " GB/s, triad "
          << limits.bandwidth->triad_gbs << " GB/s (arrays of " << (limits.bandwidth->array_bytes >> 20)
          << " MiB); decode ";
      if (run.evictor) out << "reads its cache from memory (" << (run.evictor->bytes() >> 20) << " MiB read first)";
      else out << "with a warm cache";
    }
    if (options.run.baseline) out << "; OpenBLAS kernels: " << BlasCore();
    out << "; times are medians of >= " << options.run.timing.repeats
        << " calls; cpu* columns rate each call by its process CPU time / threads\n";
    PrintTableHeader(out);
  }
  for (const BenchCase& c : cases) {
    Row row;
    switch (c.mode) {
      case Mode::kForward: row = RunForward(c, run, limits); break;
      case Mode::kDecode: row = RunDecode(c, run, limits); break;
      case Mode::kBackward: row = RunBackward(c, run, limits); break;
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
      "bench",
      "Time flashattn::forward, decode or backward against an OpenBLAS baseline, the measured FMA peak "
      "and (decode) the measured memory bandwidth. Without shape options it runs a default sweep.");
  bench::BenchOptions& o = *options;
  // Shape options.
  cmd->add_option("--mode", o.mode, "What to time: forward, decode, backward")->capture_default_str();
  cmd->add_option("--batch", o.batch, "Batch size")->capture_default_str();
  cmd->add_option("--heads", o.heads, "Query heads Hq")->capture_default_str();
  cmd->add_option("--heads-kv", o.heads_kv, "Key/value heads Hkv, dividing Hq (default: Hq)");
  cmd->add_option("--seqlen", o.seqlen, "Query length Nq (default: 4096; decode: 1 new query row)");
  cmd->add_option("--seqlen-k", o.seqlen_k, "Key length Nk (default: Nq; not for decode)");
  cmd->add_option("--cache-len", o.cache_len, "Decode: cached keys per sequence N (default: 32768)");
  cmd->add_option("--num-splits", o.num_splits, "Decode: key chunks per sequence (default 0: the heuristic)");
  cmd->add_option("--paged", o.paged, "Decode: a paged cache with this page size (default: contiguous)");
  cmd->add_option("--cache-dtype", o.cache_dtype,
                  "Decode: a quantized cache, int8 (per-token scales) or fp8_e4m3 (per-head scales), also timed "
                  "against a float16 cache (default: a cache of --dtype)");
  cmd->add_flag("--quantize-query", o.quantize_query,
                "Decode over --cache-dtype int8: scores from int8 queries and integer dot products "
                "(quantize_query_int8; AVX-512 VNNI where the CPU has it)");
  cmd->add_flag("--quantize-probs", o.quantize_probs,
                "Decode over --cache-dtype int8 with one scale per row: P̃V from u8-rounded weights and integer "
                "dot products (quantize_probs_u8; AVX-512 VNNI where the CPU has it)");
  cmd->add_option("--scale-group-size", o.scale_group_size,
                  "Decode over a quantized cache: per-token scales, one per group of this many features of each "
                  "row, dividing --headdim (default: one per row for int8; 32 is llama.cpp's q8_0 granularity)");
  cmd->add_option("--headdim", o.headdim, "Head dimension d")->capture_default_str();
  cmd->add_option("--headdim-v", o.headdim_v,
                  "Head dimension dv of V and O (default: d); decode reads V as the first dv features of the K "
                  "cache (multi-head latent attention)");
  cmd->add_flag("--sinks", o.sinks, "An attention sink per query head (no OpenBLAS baseline then)");
  cmd->add_flag("--causal", o.causal, "Causal mask (bottom-right aligned)");
  cmd->add_option("--dtype", o.dtype, "Element type: f32, f16, bf16")->capture_default_str();
  // Options for the single configuration and the sweep alike.
  cmd->add_option("--threads", o.threads, "Threads for the kernel, the baseline and the peak (0 = all cores)")
      ->capture_default_str();
  cmd->add_option("--algorithm", o.algorithm,
                  "Forward: algorithm passed to flashattn::forward (default: forward's own default)");
  cmd->add_flag("--json", o.json, "One JSON object per line instead of a table");
  cmd->add_option("--repeats", o.run.timing.repeats, "At least this many timed calls per measurement")
      ->capture_default_str();
  cmd->add_option("--min-time", o.run.timing.min_time_s,
                  "And at least this many seconds of timed calls (decode: with the reads before them)")
      ->capture_default_str();
  cmd->add_flag("--report-memory", o.run.report_memory,
                "Report the peak resident memory growth of the first call (Linux VmHWM)");
  cmd->add_flag(
      "--no-baseline", [&o](std::int64_t) { o.run.baseline = false; }, "Skip the OpenBLAS baseline");
  cmd->add_flag("--warm-cache", o.warm_cache,
                "Decode: time calls back to back, so that the cache may stay in the CPU caches (default: read "
                "twice the L3 before each call, so that each call reads its cache from memory, as a model's "
                "layer does)");
  cmd->callback([cmd, options] {
    for (const char* shape_option :
         {"--mode", "--batch", "--heads", "--heads-kv", "--seqlen", "--seqlen-k", "--cache-len",
          "--num-splits", "--paged", "--cache-dtype", "--quantize-query", "--quantize-probs", "--headdim",
          "--headdim-v", "--sinks", "--causal", "--dtype"})
      if (cmd->count(shape_option) > 0) options->single = true;
    if (options->run.baseline) bench::RunOnBestBlasCore();  // may re-execute the program (blas_core.h)
    bench::RunBench(*options, std::cout);
  });
}

}  // namespace flashattn::cli
