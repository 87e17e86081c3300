// `flashattn bench`: its options, the cases they select (one configuration, or the default sweep when no
// shape option is given), and the run that prints a table or JSON lines.
#ifndef FLASHATTN_BENCH_BENCH_COMMAND_H_
#define FLASHATTN_BENCH_BENCH_COMMAND_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "bench/bench_case.h"
#include "bench/mode_common.h"

namespace CLI {
class App;  // CLI11's, included by bench_command.cc only: its header-only library is costly to compile
}  // namespace CLI

namespace flashattn::bench {

struct BenchOptions {
  // Shape options; giving any of them selects one configuration instead of the default sweep.
  std::string mode = "forward";
  std::int64_t batch = 1;
  std::int64_t heads = 8;
  std::optional<std::int64_t> heads_kv;  // default: heads
  std::optional<std::int64_t> seqlen;    // default: 4096, or 1 query row for decode
  std::optional<std::int64_t> seqlen_k;  // default: seqlen (forward, backward)
  std::optional<std::string> cache_len;    // decode: keys in the cache, "N" (default 32768) or "A:B" (drawn)
  std::optional<std::int64_t> num_splits;  // decode: DecodeParams::num_splits (default 0 = heuristic)
  std::optional<std::int64_t> paged;       // decode: page size of a paged cache (default: contiguous)
  std::optional<std::int64_t> top_k;       // decode: selected keys per query row; indexer: keys kept (2048)
  std::string cache_dtype;  // decode, serve: "int8", "fp8_e4m3", "fp8_e5m2"; empty = a float cache of dtype
  bool quantize_query = false;  // decode, serve over an int8 cache: DecodeParams::quantize_query_int8
  bool quantize_probs = false;  // decode, serve over an int8 cache: DecodeParams::quantize_probs_u8
  std::optional<std::int64_t> scale_group_size;  // decode, serve, quantized cache: DecodeParams::scale_group_size
  std::optional<std::string> decoding;    // serve: "N:A:B", N sequences of one new row over A to B cached keys
  std::optional<std::string> prefilling;  // serve: "M:C:P", M chunks of C causal rows over P cached keys
  std::int64_t headdim = 128;
  std::optional<std::int64_t> headdim_v;
  bool sinks = false;
  bool causal = false;
  std::string sparse;  // forward, backward: "documents" or "sliding" (bench_case.h, Sparsity); empty = none
  std::string dtype = "f32";
  bool single = false;
  std::string preset;  // a named list of cases (presets.h) instead of the sweep; takes no shape options
  // Options for all of them.
  std::optional<std::uint64_t> seed;  // of the cache lengths drawn for --cache-len A:B, --decoding (default 1)
  std::optional<int> threads;  // 0 = all cores; default: all cores, or a preset's own count
  int rounds = 1;              // the whole list of cases, run this many times in turn
  std::string algorithm;    // empty = whatever flashattn::forward defaults to
  bool json = false;
  bool warm_cache = false;  // decode: no eviction before each call (RunOptions::evictor stays null)
  RunOptions run;
};

// The cases `options` select, with threads resolved. Throws Error naming the option for bad values.
std::vector<BenchCase> PlanCases(const BenchOptions& options);

// Whether the OpenBLAS baseline runs: unless --no-baseline, --mode serve or indexer, or a preset without it.
bool RunsBaseline(const BenchOptions& options);

// Runs the planned cases `options.rounds` times in turn and writes the FMA peak (and, with decode rows, the
// int8 dot-product peak and, before each round, the bandwidth), one table line or JSON object per case and
// round to `out`, then with several rounds one summary per case.
void RunBench(const BenchOptions& options, std::ostream& out);

}  // namespace flashattn::bench

namespace flashattn::cli {

// Registers `flashattn bench` (declared for the CLI in cli/commands.h).
void AddBenchCommand(CLI::App& app);

}  // namespace flashattn::cli

#endif  // FLASHATTN_BENCH_BENCH_COMMAND_H_
