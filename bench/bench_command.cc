#include "bench/bench_command.h"

#include <CLI/CLI.hpp>
#include <omp.h>

#include <algorithm>
#include <iostream>
#include <memory>

#include "bench/blas_core.h"
#include "bench/modes.h"
#include "bench/presets.h"
#include "bench/report.h"
#include "support/fail.h"

namespace flashattn::bench {

namespace {

constexpr std::int64_t kDefaultSeqlen = 4096, kDefaultCacheLen = 32768, kDefaultServePageSize = 16;

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

// The quantized cache's options of the single configuration `o` (decode or serve), into c.
void ApplyCacheOptions(const BenchOptions& o, BenchCase& c) {
  if (!o.cache_dtype.empty()) c.cache_element = ParseCacheElement(o.cache_dtype, "--cache-dtype");
  const std::string cache_dtype = o.cache_dtype.empty() ? std::string("(none)") : o.cache_dtype;
  for (const auto& [option, given] : {std::pair{"--quantize-query", o.quantize_query},
                                      std::pair{"--quantize-probs", o.quantize_probs}}) {
    if (given && c.cache_element != CacheElement::kInt8) {
      support::Fail(option, " applies to --mode decode or serve with --cache-dtype int8, got --cache-dtype ",
                    cache_dtype);
    }
  }
  c.quantize_query = o.quantize_query;
  c.quantize_probs = o.quantize_probs;
  if (!o.scale_group_size) return;
  if (c.cache_element == CacheElement::kFloat) {
    support::Fail("--scale-group-size applies to --mode decode or serve with a quantized --cache-dtype (int8, "
                  "fp8_e4m3, fp8_e5m2), got --cache-dtype (none)");
  }
  const std::int64_t g = *o.scale_group_size;
  if (g <= 0 || o.headdim % g != 0) {
    support::Fail("--scale-group-size must divide --headdim (", o.headdim, "), got ", g);
  }
  // Integer P̃V scales a whole row of V by one factor.
  if (o.quantize_probs && g != o.headdim) {
    support::Fail("--quantize-probs needs one scale per row: --scale-group-size equal to --headdim (", o.headdim,
                  ") or unset, got --scale-group-size ", g);
  }
  c.scale_group_size = g;
}

// The serving step of --decoding and --prefilling into c: always paged (--paged, default 16) and causal.
void ApplyServeOptions(const BenchOptions& o, BenchCase& c) {
  if (!o.decoding && !o.prefilling) support::Fail("--mode serve needs --decoding N:A:B, --prefilling M:C:P or both");
  for (const auto& [option, given] : {std::pair{"--batch", o.batch != 1}, std::pair{"--seqlen", o.seqlen.has_value()},
                                      std::pair{"--seqlen-k", o.seqlen_k.has_value()},
                                      std::pair{"--headdim-v", o.headdim_v.has_value()}}) {
    if (given) support::Fail(option, " does not apply to --mode serve (use --decoding and --prefilling)");
  }
  c.batch = 0;
  c.seqlen_k = 0;
  c.seqlen_q = 1;
  if (o.decoding) {
    const ServeGroup decoding = ParseDecoding(*o.decoding, "--decoding");
    c.batch = decoding.count;
    c.cache_len_min = decoding.first;
    c.seqlen_k = decoding.second;
  }
  if (o.prefilling) {
    const ServeGroup prefilling = ParsePrefilling(*o.prefilling, "--prefilling");
    c.prefill_seqs = prefilling.count;
    c.prefill_chunk = prefilling.first;
    c.prefill_prefix = prefilling.second;
    c.seqlen_q = prefilling.first;  // max_seqlen_q
  }
  c.causal = true;
  c.num_splits = o.num_splits.value_or(0);
  c.page_size = o.paged.value_or(kDefaultServePageSize);
  if (c.num_splits < 0) support::Fail("--num-splits must be >= 0 (0 = heuristic), got ", c.num_splits);
  if (c.page_size < 1) support::Fail("--paged must be >= 1, got ", c.page_size);
}

// The one configuration the shape options of `o` describe.
BenchCase SingleCase(const BenchOptions& o, int threads, std::optional<Algorithm> algorithm) {
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
  if (!o.sparse.empty()) {
    c.sparsity = ParseSparsity(o.sparse, "--sparse");
    if (c.mode != Mode::kForward && c.mode != Mode::kBackward)
      support::Fail("--sparse applies to --mode forward and backward only, got --mode ", o.mode);
  }
  const auto positive = [](const char* option, std::int64_t value) {
    if (value < 1) support::Fail(option, " must be >= 1, got ", value);
  };
  const auto only_for = [&](const char* option, bool given, Mode mode) {
    if (given && c.mode != mode)
      support::Fail(option, " applies to --mode ", ToString(mode), " only, got --mode ", o.mode);
  };
  only_for("--algorithm", algorithm.has_value(), Mode::kForward);
  only_for("--decoding", o.decoding.has_value(), Mode::kServe);
  only_for("--prefilling", o.prefilling.has_value(), Mode::kServe);
  if (o.top_k && c.mode != Mode::kDecode && c.mode != Mode::kIndexer) {
    support::Fail("--top-k applies to --mode decode and indexer only, got --mode ", o.mode);
  }
  if (c.mode == Mode::kIndexer) {  // a cache of keys as decode's, one scale per key when quantized
    only_for("--num-splits", o.num_splits.has_value(), Mode::kDecode);
    only_for("--quantize-query", o.quantize_query, Mode::kDecode);
    only_for("--quantize-probs", o.quantize_probs, Mode::kDecode);
    only_for("--scale-group-size", o.scale_group_size.has_value(), Mode::kDecode);
  } else {
    only_for("--cache-len", o.cache_len.has_value(), Mode::kDecode);
    if (c.mode != Mode::kServe) {  // options of decode and serve alike
      only_for("--cache-dtype", !o.cache_dtype.empty(), Mode::kDecode);
      only_for("--num-splits", o.num_splits.has_value(), Mode::kDecode);
      only_for("--paged", o.paged.has_value(), Mode::kDecode);
    }
  }
  ApplyCacheOptions(o, c);
  if (c.mode == Mode::kServe) {
    ApplyServeOptions(o, c);
  } else if (c.mode == Mode::kIndexer) {
    if (o.seqlen_k) support::Fail("--seqlen-k does not apply to --mode indexer (use --cache-len), got ", *o.seqlen_k);
    if (o.cache_len && o.cache_len->find(':') != std::string::npos) {
      support::Fail("--cache-len of --mode indexer is one length N, got ", *o.cache_len);
    }
    c.seqlen_q = o.seqlen.value_or(1);
    c.seqlen_k = o.cache_len ? ParseCacheLen(*o.cache_len, "--cache-len").max : kDefaultCacheLen;
    c.heads_kv = 1;
    c.page_size = o.paged.value_or(0);
    c.top_k = o.top_k.value_or(2048);
    if (o.paged) positive("--paged", c.page_size);
    positive("--top-k", c.top_k);
  } else if (c.mode == Mode::kDecode) {
    if (o.seqlen_k) support::Fail("--seqlen-k does not apply to --mode decode (use --cache-len), got ", *o.seqlen_k);
    c.seqlen_q = o.seqlen.value_or(1);
    const CacheLenRange lengths =
        o.cache_len ? ParseCacheLen(*o.cache_len, "--cache-len") : CacheLenRange{.max = kDefaultCacheLen};
    c.seqlen_k = lengths.max;
    c.cache_len_min = lengths.min;
    c.num_splits = o.num_splits.value_or(0);
    c.page_size = o.paged.value_or(0);
    if (c.num_splits < 0) support::Fail("--num-splits must be >= 0 (0 = heuristic), got ", c.num_splits);
    if (o.paged) positive("--paged", c.page_size);
    c.top_k = o.top_k.value_or(0);
    if (o.top_k) positive("--top-k", c.top_k);
  } else {
    c.seqlen_q = o.seqlen.value_or(kDefaultSeqlen);
    c.seqlen_k = o.seqlen_k.value_or(c.seqlen_q);
    c.algorithm = algorithm;
  }
  if (c.mode != Mode::kServe) {
    positive("--batch", c.batch);
    positive("--seqlen-k", c.seqlen_k);
  }
  positive("--heads", c.heads);
  positive("--heads-kv", c.heads_kv);
  positive("--seqlen", c.seqlen_q);
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
  const double largest =
      c.mode == Mode::kServe
          ? static_cast<double>(TotalCacheLength(c)) * static_cast<double>(c.heads_kv * c.headdim) * size_of(c.dtype)
          : static_cast<double>(c.batch) * static_cast<double>(std::max(c.seqlen_q, c.seqlen_k)) *
                static_cast<double>(c.heads) * static_cast<double>(c.headdim) * size_of(c.dtype);
  if (largest > 0x1p40)
    support::Fail("--batch, --seqlen, --seqlen-k, --cache-len, --decoding, --prefilling, --heads, --headdim: a "
                  "tensor would need ",
         largest / 0x1p30, " GiB");
  return c;
}

// The cases of preset `o.preset` on `threads` threads (its own count unless --threads is given).
std::vector<BenchCase> PresetCases(const BenchOptions& o) {
  const Preset& preset = FindPreset(o.preset, "--preset");
  if (o.single) {
    support::Fail("--preset ", o.preset, " runs its own shapes: give it no shape option (--mode, --batch, "
                  "--heads, --cache-len, --dtype ...)");
  }
  if (!o.algorithm.empty()) support::Fail("--algorithm does not apply to --preset ", o.preset);
  const int threads = !o.threads ? preset.threads : *o.threads > 0 ? *o.threads : omp_get_max_threads();
  std::vector<BenchCase> cases(preset.cases.begin(), preset.cases.end());
  for (BenchCase& c : cases) c.threads = threads;
  return cases;
}

}  // namespace

std::vector<BenchCase> PlanCases(const BenchOptions& o) {
  if (o.threads.value_or(0) < 0) support::Fail("--threads must be >= 0 (0 = all cores), got ", *o.threads);
  const int threads = o.threads.value_or(0) > 0 ? *o.threads : omp_get_max_threads();
  std::optional<Algorithm> algorithm;
  if (!o.algorithm.empty()) algorithm = parse_algorithm(o.algorithm, "--algorithm");
  std::vector<BenchCase> cases;
  if (!o.preset.empty()) cases = PresetCases(o);
  else if (o.single) cases = {SingleCase(o, threads, algorithm)};
  else cases = DefaultSweep(threads, algorithm);
  if (o.seed) {
    const auto drawn = [](const BenchCase& c) { return c.cache_len_min > 0; };
    if (std::none_of(cases.begin(), cases.end(), drawn))
      support::Fail("--seed applies to drawn cache lengths (--cache-len A:B, or a preset's), got --seed ", *o.seed);
    for (BenchCase& c : cases) c.seed = *o.seed;
  }
  return cases;
}

bool RunsBaseline(const BenchOptions& options) {
  if (options.preset.empty() && (options.mode == ToString(Mode::kServe) || options.mode == ToString(Mode::kIndexer))) {
    return false;  // serve and the indexer have none
  }
  return options.run.baseline && (options.preset.empty() || FindPreset(options.preset).baseline);
}

namespace {

// The run's first line: the arithmetic peaks, how decode reads its cache, the baseline's BLAS and the timing rule.
void PrintLimits(std::ostream& out, const Limits& limits, const RunOptions& run, const TimingOptions& timing) {
  out << "FMA peak: " << limits.peak.gflops << " GFLOP/s on " << limits.peak.threads << " threads ("
      << limits.peak.target << "), " << limits.peak.cpu_gflops << " per CPU time";
  if (limits.int8_dot_peak) {
    const measure::Int8DotPeak& int8 = *limits.int8_dot_peak;
    out << "; int8 dot-product peak: " << int8.gops << " GOP/s (" << int8.instruction << ", " << int8.target
        << "), " << int8.cpu_gops << " per CPU time; decode ";
    if (run.evictor) out << "reads its cache from memory (" << (run.evictor->bytes() >> 20) << " MiB read first)";
    else out << "with a warm cache";
  }
  if (run.baseline) out << "; OpenBLAS kernels: " << BlasCore();
  out << "; times are medians of >= " << timing.repeats
      << " calls; cpu* columns rate each call by its process CPU time / threads\n";
}

void PrintBandwidth(std::ostream& out, const measure::Bandwidth& bandwidth, int round, int rounds) {
  out << "memory bandwidth";
  if (rounds > 1) out << ", round " << round << " of " << rounds;
  out << ": read " << bandwidth.read_gbs << " GB/s, triad " << bandwidth.triad_gbs << " GB/s (arrays of "
      << (bandwidth.array_bytes >> 20) << " MiB)\n";
}

Row RunCase(const BenchCase& c, const RunOptions& run, const Limits& limits) {
  switch (c.mode) {
    case Mode::kForward: return RunForward(c, run, limits);
    case Mode::kDecode: return RunDecode(c, run, limits);
    case Mode::kBackward: return RunBackward(c, run, limits);
    case Mode::kServe: return RunServe(c, run, limits);
    case Mode::kIndexer: return RunIndexer(c, run, limits);
  }
  return {};
}

}  // namespace

void RunBench(const BenchOptions& options, std::ostream& out) {
  if (options.run.timing.repeats < 1) support::Fail("--repeats must be >= 1, got ", options.run.timing.repeats);
  if (!(options.run.timing.min_time_s >= 0))
    support::Fail("--min-time must be >= 0 seconds, got ", options.run.timing.min_time_s);
  if (options.rounds < 1) support::Fail("--rounds must be >= 1, got ", options.rounds);
  const std::vector<BenchCase> cases = PlanCases(options);
  const int threads = cases.front().threads;
  const bool decode =
      std::any_of(cases.begin(), cases.end(),
                  [](const BenchCase& c) { return c.mode == Mode::kDecode || c.mode == Mode::kServe; });

  Limits limits;
  limits.peak = measure::MeasureFmaPeak(threads);
  RunOptions run = options.run;
  run.baseline = RunsBaseline(options);
  const std::int64_t main_memory_bytes = measure::MainMemoryBytes();
  if (decode) {
    limits.int8_dot_peak = measure::MeasureInt8DotPeak(threads);
    if (!options.warm_cache) run.evictor = std::make_shared<measure::CacheEvictor>(main_memory_bytes, threads);
  }
  if (!options.json) PrintLimits(out, limits, run, options.run.timing);

  // Round after round over the whole list; each case's memory is allocated in its run and freed after it.
  std::vector<CaseRounds> rounds(cases.size());
  for (int round = 1; round <= options.rounds; ++round) {
    if (decode) {  // again each round: the bandwidth of a shared machine varies from one minute to the next
      limits.bandwidth = measure::MeasureBandwidth(threads, main_memory_bytes);
      if (!options.json) PrintBandwidth(out, *limits.bandwidth, round, options.rounds);
    }
    if (!options.json && round == 1) PrintTableHeader(out);
    for (std::size_t i = 0; i < cases.size(); ++i) {
      Row row = RunCase(cases[i], run, limits);
      if (options.rounds > 1) row.round = round;
      if (options.json) out << ToJson(row) << "\n";
      else PrintTableRow(out, row);
      out.flush();
      rounds[i].rows.push_back(std::move(row));
    }
  }
  if (options.rounds == 1) return;
  if (!options.json) out << "medians over the rounds:\n";
  for (const CaseRounds& summary : rounds) {
    if (options.json) out << ToJson(summary) << "\n";
    else PrintSummaryRow(out, summary);
  }
}

}  // namespace flashattn::bench

namespace flashattn::cli {

void AddBenchCommand(CLI::App& app) {
  auto options = std::make_shared<bench::BenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "Time flashattn::forward, decode or backward against an OpenBLAS baseline, the measured FMA peak "
      "and (decode) the measured memory bandwidth and the call's roofline. Without shape options it runs a "
      "default sweep, or a --preset.");
  bench::BenchOptions& o = *options;
  // Shape options.
  cmd->add_option("--mode", o.mode,
                  "What to time: forward, decode, backward, serve (one packed decode call of a serving step: "
                  "--decoding, --prefilling), indexer (the lightning indexer: --heads indexer heads, --cache-len "
                  "keys, --top-k, --dtype of q and k or --cache-dtype)")
      ->capture_default_str();
  cmd->add_option("--batch", o.batch, "Batch size")->capture_default_str();
  cmd->add_option("--heads", o.heads, "Query heads Hq")->capture_default_str();
  cmd->add_option("--heads-kv", o.heads_kv, "Key/value heads Hkv, dividing Hq (default: Hq)");
  cmd->add_option("--seqlen", o.seqlen, "Query length Nq (default: 4096; decode: 1 new query row)");
  cmd->add_option("--seqlen-k", o.seqlen_k, "Key length Nk (default: Nq; not for decode)");
  cmd->add_option("--cache-len", o.cache_len,
                  "Decode: cached keys per sequence, N (default: 32768), or A:B: each sequence's length drawn "
                  "uniformly from [A, B] (--seed)");
  cmd->add_option("--decoding", o.decoding,
                  "Serve: N:A:B, N sequences generating one token each over a cache of A to B keys, each drawn "
                  "uniformly from [A, B] (--seed)");
  cmd->add_option("--prefilling", o.prefilling,
                  "Serve: M:C:P, M sequences each with a chunk of C new query rows over a cached prefix of P keys; "
                  "the chunk's keys are already in the cache (P + C keys), its rows causal, bottom-right aligned");
  cmd->add_option("--num-splits", o.num_splits,
                  "Decode, serve: key chunks per sequence (default 0: the heuristic)");
  cmd->add_option("--paged", o.paged,
                  "Decode: a paged cache with this page size (default: contiguous); serve: the page size "
                  "(default 16)");
  cmd->add_option("--top-k", o.top_k,
                  "Decode: attention over selected keys, each query row attending this many random distinct keys "
                  "of its sequence (key_indices); also times dense decode over that many contiguous keys. "
                  "Indexer: keys kept per query row (default 2048)");
  cmd->add_option("--cache-dtype", o.cache_dtype,
                  "Decode, serve: a quantized cache, int8 (per-token scales), fp8_e4m3 or fp8_e5m2 (per-head "
                  "scales); decode also times it against a float16 cache (default: a cache of --dtype)");
  cmd->add_flag("--quantize-query", o.quantize_query,
                "Decode, serve over --cache-dtype int8: scores from int8 queries and integer dot products "
                "(quantize_query_int8; AVX-512 VNNI where the CPU has it)");
  cmd->add_flag("--quantize-probs", o.quantize_probs,
                "Decode, serve over --cache-dtype int8 with one scale per row: P̃V from u8-rounded weights and integer "
                "dot products (quantize_probs_u8; AVX-512 VNNI where the CPU has it)");
  cmd->add_option("--scale-group-size", o.scale_group_size,
                  "Decode, serve over a quantized cache: per-token scales, one per group of this many features of each "
                  "row, dividing --headdim (default: one per row for int8; 32 is llama.cpp's q8_0 granularity)");
  cmd->add_option("--headdim", o.headdim, "Head dimension d")->capture_default_str();
  cmd->add_option("--headdim-v", o.headdim_v,
                  "Head dimension dv of V and O (default: d); decode reads V as the first dv features of the K "
                  "cache (multi-head latent attention)");
  cmd->add_flag("--sinks", o.sinks, "An attention sink per query head (no OpenBLAS baseline then)");
  cmd->add_flag("--causal", o.causal, "Causal mask (bottom-right aligned)");
  cmd->add_option("--sparse", o.sparse,
                  "Forward, backward: block-sparse attention, 'documents' (8 equal documents, causal within each) "
                  "or 'sliding' (causal window of 512 keys, the first 64 keys global), timed against the dense "
                  "call (no mask at all); the note gives the visited fraction of the blocks and time / (visited "
                  "fraction x dense time). No OpenBLAS baseline then");
  cmd->add_option("--dtype", o.dtype, "Element type: f32, f16, bf16 (decode, serve: also of the cache)")
      ->capture_default_str();
  // Options for the single configuration, the sweep and the presets alike.
  cmd->add_option("--preset", o.preset,
                  "Run a named list of cases instead of the sweep (no shape options, no baseline): " +
                      bench::DescribePresets());
  cmd->add_option("--rounds", o.rounds,
                  "Run the whole list of cases this many times in turn, the bandwidth measured again before each "
                  "round; then print each case's medians over the rounds")
      ->capture_default_str();
  cmd->add_option("--seed", o.seed,
                  "Seed of the cache lengths drawn for --cache-len A:B and --decoding (std::mt19937_64; default 1)");
  cmd->add_option("--threads", o.threads,
                  "Threads for the kernel, the baseline and the peaks (0 = all cores; default: all cores, a "
                  "preset's own count with --preset)");
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
          "--num-splits", "--paged", "--decoding", "--prefilling", "--cache-dtype", "--quantize-query",
          "--quantize-probs", "--top-k", "--headdim",
          "--headdim-v", "--sinks", "--causal", "--sparse", "--dtype"})
      if (cmd->count(shape_option) > 0) options->single = true;
    if (bench::RunsBaseline(*options)) bench::RunOnBestBlasCore();  // may re-execute the program (blas_core.h)
    bench::RunBench(*options, std::cout);
  });
}

}  // namespace flashattn::cli
