// flashattn io: the IO model (docs/io.md) for one shape. For each algorithm, the elements and bytes it moves
// between main memory and fast memory, its FLOPs and arithmetic intensity, from two sources that must agree:
// the closed form (tools/io_model/io_model.h, derived in docs/io.md) and a run of the reference algorithm in
// which every main-memory access is counted. Next to them, this machine's ridge point, measured.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "flashattn/flashattn.h"
#include "io_model/io_model.h"
#include "io_model/machine.h"
#include "support/fail.h"

namespace flashattn::cli {
namespace {

// The decode model keeps every query row of a K/V head group in fast memory: a few rows only.
constexpr int kDecodeMaxRows = 16;

struct IoOptions {
  std::int64_t batch = 1, heads = 1, heads_kv = 0, seqlen = 0, seqlen_k = 0, headdim = 0, headdim_v = 0;
  std::int64_t fast_memory = 0, splits = 0;
  std::string dtype = "f32";
  bool causal = false, no_lse = false, no_measure = false;
  double max_counted_work = 2147483648.0;  // 2^31 multiply-adds: a few seconds of the scalar reference
  int threads = 0;
  // Options whose default depends on others; given explicitly, they are checked like the rest.
  bool seqlen_k_given = false, headdim_v_given = false, heads_kv_given = false, fast_memory_given = false,
       splits_given = false;
};

void CheckAtLeast(const char* option, std::int64_t value, std::int64_t min) {
  if (value < min) support::Fail(option, " must be >= ", min, ", got ", value);
}

// The shape as params without tensors: the closed forms read only sizes, dtype, masks, tiling and whether
// LSE is wanted (a non-null lse pointer, never dereferenced).
AttentionParams ShapeParams(const IoOptions& o, float* lse_marker) {
  AttentionParams p;
  p.batch = o.batch, p.heads_q = o.heads, p.heads_kv = o.heads_kv;
  p.seqlen_q = o.seqlen, p.seqlen_k = o.seqlen_k;
  p.head_dim = o.headdim, p.head_dim_v = o.headdim_v;
  p.dtype = o.dtype == "f16" ? DType::kF16 : o.dtype == "bf16" ? DType::kBF16 : DType::kF32;
  p.causal = o.causal;
  p.lse = o.no_lse ? nullptr : lse_marker;
  p.tiling.fast_memory_bytes = o.fast_memory;
  p.num_threads = o.threads;
  return p;
}

void CheckOptions(IoOptions& o) {
  CheckAtLeast("--seqlen", o.seqlen, 1);
  if (!o.seqlen_k_given) o.seqlen_k = o.seqlen;
  CheckAtLeast("--seqlen-k", o.seqlen_k, 1);
  CheckAtLeast("--headdim", o.headdim, 1);
  if (o.headdim > kMaxHeadDim) support::Fail("--headdim must be <= ", kMaxHeadDim, ", got ", o.headdim);
  if (!o.headdim_v_given) o.headdim_v = o.headdim;
  CheckAtLeast("--headdim-v", o.headdim_v, 1);
  if (o.headdim_v > kMaxHeadDim) support::Fail("--headdim-v must be <= ", kMaxHeadDim, ", got ", o.headdim_v);
  CheckAtLeast("--batch", o.batch, 1);
  CheckAtLeast("--heads", o.heads, 1);
  if (!o.heads_kv_given) o.heads_kv = o.heads;
  CheckAtLeast("--heads-kv", o.heads_kv, 1);
  if (o.heads % o.heads_kv != 0) {
    support::Fail("--heads must be a multiple of --heads-kv, got --heads ", o.heads, " --heads-kv ", o.heads_kv);
  }
  CheckAtLeast("--threads", o.threads, 0);
  // The library's bound on num_threads.
  if (o.threads > 1024) support::Fail("--threads must be <= 1024, got ", o.threads);
  if (!(o.max_counted_work >= 0.0)) support::Fail("--max-counted-work must be >= 0, got ", o.max_counted_work);
  // The closed forms count elements and bytes in int64; every count is a small multiple of this product.
  const double work = static_cast<double>(o.batch) * static_cast<double>(o.heads) *
                      static_cast<double>(o.seqlen) * static_cast<double>(o.seqlen_k) *
                      static_cast<double>(o.headdim + o.headdim_v);
  if (work > 0x1p57) {
    support::Fail("--batch ", o.batch, " --heads ", o.heads, " --seqlen ", o.seqlen, " --seqlen-k ", o.seqlen_k,
         " --headdim ", o.headdim, " --headdim-v ", o.headdim_v,
         ": batch*heads*Nq*Nk*(d+dv) exceeds 2^57, beyond the 64-bit counts of the IO models");
  }
  if (o.splits_given) {  // more chunks than keys only adds empty ones
    CheckAtLeast("--splits", o.splits, 1);
    if (o.splits > o.seqlen_k) support::Fail("--splits must be <= --seqlen-k (", o.seqlen_k, "), got ", o.splits);
  }
  if (o.fast_memory_given) {
    CheckAtLeast("--fast-memory", o.fast_memory, 1);
    const std::int64_t tile = io_model::TileBytes(1, 1, o.headdim, o.headdim_v);
    if (o.fast_memory < tile) {
      support::Fail("--fast-memory ", o.fast_memory, " bytes is too small for one 1x1 tile, which needs ", tile,
           " bytes at d=", o.headdim, " dv=", o.headdim_v);
    }
  }
}

// Zero-filled tensors for the counted run: the counts do not depend on the values.
struct Buffers {
  std::vector<float> q, k, v, o, lse;
};

// The shape with zero-filled buffers, for the counted runs.
AttentionParams WithBuffers(const AttentionParams& shape, Buffers& buffers) {
  AttentionParams p = shape;
  const std::int64_t elem = static_cast<std::int64_t>(size_of(p.dtype));
  auto floats = [elem](std::int64_t elements) { return static_cast<std::size_t>((elements * elem + 3) / 4); };
  buffers.q.assign(floats(p.batch * p.seqlen_q * p.heads_q * p.head_dim), 0.0f);
  buffers.k.assign(floats(p.batch * p.seqlen_k * p.heads_kv * p.head_dim), 0.0f);
  buffers.v.assign(floats(p.batch * p.seqlen_k * p.heads_kv * p.value_head_dim()), 0.0f);
  buffers.o.assign(floats(p.batch * p.seqlen_q * p.heads_q * p.value_head_dim()), 0.0f);
  buffers.lse.assign(static_cast<std::size_t>(p.batch * p.heads_q * p.seqlen_q), 0.0f);
  p.q = buffers.q.data(), p.k = buffers.k.data(), p.v = buffers.v.data(), p.o = buffers.o.data();
  if (p.lse != nullptr) p.lse = buffers.lse.data();
  p.set_contiguous_strides();
  return p;
}

std::string Blocks(const io_model::Cost& cost) {
  if (cost.Br == 0 && cost.Bc == 0) return "-";
  return (cost.Br > 0 ? std::to_string(cost.Br) : std::string("all")) + "x" + std::to_string(cost.Bc);
}

void PrintRow(const std::string& name, const std::string& blocks, const std::string& source,
              const io_model::IoCount& io, const io_model::Cost& cost, const std::string& note) {
  const double bytes = static_cast<double>(io.read_bytes + io.written_bytes);
  std::printf("%-9s %-9s %-8s %15lld %15lld %15lld %15lld %11.4g %9.3f%s%s\n", name.c_str(), blocks.c_str(),
              source.c_str(), static_cast<long long>(io.read), static_cast<long long>(io.written),
              static_cast<long long>(io.read_bytes), static_cast<long long>(io.written_bytes), cost.flops,
              bytes > 0 ? cost.flops / bytes : 0.0, note.empty() ? "" : "  ", note.c_str());
}

void RunIo(IoOptions o) {
  CheckOptions(o);
  const io_model::L2Cache l2 = io_model::DetectedL2Cache();
  const bool fast_memory_given = o.fast_memory_given;
  if (!fast_memory_given) o.fast_memory = l2.bytes;
  float lse_marker = 0.0f;
  const AttentionParams shape = ShapeParams(o, &lse_marker);

  std::printf("shape: batch %lld, heads %lld (K/V heads %lld), Nq %lld, Nk %lld, d %lld, dv %lld, %s, %s, "
              "LSE %s\n", static_cast<long long>(o.batch), static_cast<long long>(o.heads),
              static_cast<long long>(o.heads_kv), static_cast<long long>(o.seqlen),
              static_cast<long long>(o.seqlen_k), static_cast<long long>(o.headdim),
              static_cast<long long>(o.headdim_v), o.dtype.c_str(), o.causal ? "causal" : "not causal",
              o.no_lse ? "not written" : "written");
  std::printf("fast memory M: %lld bytes (%s)\n", static_cast<long long>(o.fast_memory),
              fast_memory_given ? "--fast-memory"
              : l2.detected     ? "detected per-core L2"
                                : "default per-core L2; its size could not be detected");
  if (!o.no_measure) {
    const io_model::Machine machine = io_model::MeasureMachine(o.threads);
    std::printf("machine: FMA peak %.1f GFLOP/s, read bandwidth %.1f GB/s on %d threads -> ridge point "
                "%.2f FLOP/byte (below it an algorithm is bound by memory)\n",
                machine.fma_gflops, machine.bandwidth_gbs, machine.threads, machine.RidgePoint());
  }
  std::printf("\nTraffic between main memory and fast memory for the whole call. 'model' is the closed form "
              "of docs/io.md;\n'counted' runs the algorithm's loops with every main-memory access counted: "
              "the reference algorithms\nthemselves, and for fused and decode the kernels' loops in scalar "
              "code (tools/io_model/counted_*.cc).\nFLOPs: the two matrix products over the tiles visited. "
              "The reference flash1/flash2 visit every tile,\nmasked or not; the fused kernel and decode "
              "skip keys outside the causal/window band. FLOP/byte is the\narithmetic intensity to compare "
              "with the ridge point.\n\n");
  std::printf("%-9s %-9s %-8s %15s %15s %15s %15s %11s %9s\n", "algorithm", "Br x Bc", "source", "elems read",
              "elems written", "bytes read", "bytes written", "FLOPs", "FLOP/byte");

  const double work = static_cast<double>(o.batch) * static_cast<double>(o.heads) *
                      static_cast<double>(o.seqlen) * static_cast<double>(o.seqlen_k) *
                      static_cast<double>(o.headdim + o.headdim_v);
  const bool count = work <= o.max_counted_work;
  bool all_equal = true;
  Buffers buffers;
  // One algorithm: the model's row, then the counted run's (or why it was skipped).
  const auto rows = [&](const std::string& name, const std::string& blocks, const io_model::Cost& model,
                        const std::string& note, auto&& counted_run) {
    PrintRow(name, blocks, "model", model.io, model, note);
    if (!count) {
      std::printf("%-9s %-9s %-8s skipped: %.3g multiply-adds exceed --max-counted-work %.3g\n", "", "",
                  "counted", work, o.max_counted_work);
      return;
    }
    const io_model::IoCount counted = counted_run(WithBuffers(shape, buffers));
    all_equal = all_equal && counted == model.io;
    PrintRow("", "", "counted", counted, model, counted == model.io ? "= model" : "DIFFERS from model");
  };
  for (Algorithm algorithm : {Algorithm::kStandard, Algorithm::kFlash1, Algorithm::kFlash2}) {
    const io_model::Cost model = algorithm == Algorithm::kStandard ? io_model::Standard(shape)
                                 : algorithm == Algorithm::kFlash1 ? io_model::Flash1(shape)
                                                                   : io_model::Flash2(shape);
    rows(std::string(to_string(algorithm)), Blocks(model), model, "",
         [algorithm](const AttentionParams& p) { return io_model::RunCounted(p, algorithm); });
  }
  const io_model::FusedGeometry g = io_model::FusedGeometryOf(shape);
  const io_model::Cost fused = io_model::Fused(shape);
  rows("fused", Blocks(fused), fused, "",
       [](const AttentionParams& p) { return io_model::RunCounted(p, Algorithm::kFused); });
  if (o.headdim_v != o.headdim) {
    std::printf("%-9s %-9s %-8s not applicable: decode's K and V share one head dimension (--headdim-v = "
                "--headdim)\n", "decode", "-", "model");
  } else if (o.seqlen > kDecodeMaxRows) {
    std::printf("%-9s %-9s %-8s not applicable: Flash-Decoding is for Nq <= %d query rows (e.g. --seqlen 1 "
                "--seqlen-k %lld)\n",
                "decode", "-", "model", kDecodeMaxRows, static_cast<long long>(o.seqlen_k));
  } else {
    const std::int64_t splits = o.splits_given ? o.splits : io_model::DecodeSplits(shape);
    const io_model::Cost decode = io_model::Decode(shape, splits);
    rows("decode", std::to_string(splits) + "x" + std::to_string(decode.Bc), decode, "",
         [splits](const AttentionParams& p) { return io_model::RunCountedDecode(p, splits); });
  }
  std::printf("\nBlocks: flash1 and flash2 from M by FlashAttention's rule (docs/algorithms.md). fused:\n"
              "forward_kernel::ChooseFusedTiling from the detected L2 (not --fast-memory), clamped to Nq and Nk as the "
              "kernel\nclamps them; on this %s target the kernel packs K in panels of %lld keys (%lld per block) "
              "and\n%s.\n",
              io_model::FusedTargetName().c_str(),
              static_cast<long long>(g.NR), static_cast<long long>(g.Bc_pad),
              g.packs_v ? "V once per K/V head next to it"
                        : "reads V from the caller per tile (K and V of one head exceed its 16 MiB "
                          "packing budget)");
  std::printf("decode: splits x keys per chunk; splits from choose_num_splits(batch, Nk, threads) as decode() "
              "chooses\nthem, or --splits.\n");
  if (!count) std::printf("\nThe counted runs were skipped; pass a larger --max-counted-work to run them.\n");
  if (!all_equal) support::Fail("the counted traffic differs from the closed form (see the rows marked DIFFERS)");
}

}  // namespace

void AddIoCommand(CLI::App& app) {
  auto options = std::make_shared<IoOptions>();
  CLI::App* io = app.add_subcommand(
      "io",
      "Main-memory traffic of each algorithm: closed form, counted run, and this machine's ridge point");
  io->add_option("--seqlen", options->seqlen, "Nq, query rows per head")->required();
  CLI::Option* seqlen_k =
      io->add_option("--seqlen-k", options->seqlen_k, "Nk, key/value rows per head (default: Nq)");
  io->add_option("--headdim", options->headdim, "d, head dimension of Q and K")->required();
  CLI::Option* headdim_v =
      io->add_option("--headdim-v", options->headdim_v, "dv, head dimension of V and O (default: d)");
  io->add_option("--batch", options->batch, "batch size (default 1)");
  io->add_option("--heads", options->heads, "query heads Hq (default 1)");
  CLI::Option* heads_kv =
      io->add_option("--heads-kv", options->heads_kv, "key/value heads Hkv, dividing Hq (default: Hq)");
  CLI::Option* fast_memory = io->add_option("--fast-memory", options->fast_memory,
                 "fast memory M in bytes that sizes the tiles (default: the detected per-core L2)");
  io->add_option("--dtype", options->dtype, "element type of Q, K, V, O")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
  io->add_flag("--causal", options->causal,
               "causal mask (the reference flash1/flash2 still visit every tile)");
  io->add_flag("--no-lse", options->no_lse, "do not write LSE (the textbook 4Nd + 4N^2 has no LSE)");
  CLI::Option* splits = io->add_option("--splits", options->splits,
                                       "K/V chunks of decode, 1..Nk (default: decode()'s choose_num_splits)");
  io->add_option("--threads", options->threads, "threads for the counted runs and measurements (0 = all)");
  io->add_option("--max-counted-work", options->max_counted_work,
                 "skip the counted runs above this many multiply-adds b*Hq*Nq*Nk*(d+dv) (default 2^31)");
  io->add_flag("--no-measure", options->no_measure, "skip the FMA peak and bandwidth measurement");
  io->callback([=] {
    options->seqlen_k_given = seqlen_k->count() > 0, options->headdim_v_given = headdim_v->count() > 0;
    options->heads_kv_given = heads_kv->count() > 0, options->fast_memory_given = fast_memory->count() > 0;
    options->splits_given = splits->count() > 0;
    RunIo(*options);
  });
}

}  // namespace flashattn::cli
