#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "flashattn/flashattn.h"
#include "ring/ring_bench.h"

namespace flashattn::ring_bench {

DType Options::Dtype() const {
  if (dtype == "f32") return DType::kF32;
  if (dtype == "f16") return DType::kF16;
  if (dtype == "bf16") return DType::kBF16;
  throw Error("--dtype must be f32, f16 or bf16, got " + dtype);
}

}  // namespace flashattn::ring_bench

int main(int argc, char** argv) {
  using flashattn::ring_bench::Options;
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  Options o;
  CLI::App app{
      "Times ring attention (forward and backward) or sharded decoding over the ranks of mpirun, "
      "per rank and step, and checks the result against one process."};
  app.add_option("--mode", o.mode, "ring or decode")->check(CLI::IsMember({"ring", "decode"}))->capture_default_str();
  app.add_option("--batch", o.batch, "Batch size")->capture_default_str();
  app.add_option("--seqlen", o.seqlen, "Ring: global sequence length N")->capture_default_str();
  app.add_option("--heads", o.heads, "Query heads Hq")->capture_default_str();
  app.add_option("--heads-kv", o.heads_kv, "Key/value heads Hkv (default: Hq)");
  app.add_option("--head-dim", o.head_dim, "Head dimension d")->capture_default_str();
  app.add_flag("--causal", o.causal, "Causal mask");
  app.add_option("--window-left", o.window_left, "Sliding window, keys to the left (-1: unbounded)");
  app.add_option("--window-right", o.window_right, "Sliding window, keys to the right (-1: unbounded)");
  app.add_option("--layout", o.layout, "Ring: zigzag or contiguous")->capture_default_str();
  app.add_option("--dtype", o.dtype, "f32, f16 or bf16")->capture_default_str();
  app.add_option("--threads", o.threads, "Threads per rank")->capture_default_str();
  app.add_option("--single-threads", o.single_threads,
                 "Threads of the one-process comparison (default: W × --threads)");
  app.add_option("--repeats", o.repeats, "Timed calls after a warm-up (medians reported)")->capture_default_str();
  app.add_flag("!--no-backward", o.backward, "Ring: time the forward pass only");
  app.add_flag("!--no-check", o.check, "Skip the check against one process (saves rank 0's memory and time)");
  app.add_flag("!--no-compare", o.compare, "Skip timing one process on the whole problem");
  app.add_option("--json", o.json, "Write the measurements (per rank and step) to this file (rank 0)");
  app.add_option("--cache-len", o.cache_len, "Decode: cached keys per sequence, over all ranks")->capture_default_str();
  app.add_option("--seqlen-q", o.seqlen_q, "Decode: query rows per sequence")->capture_default_str();
  app.add_option("--num-splits", o.num_splits, "Decode: each rank's num_splits (0 = heuristic)")->capture_default_str();
  int status = 0;
  try {
    app.parse(argc, argv);
    status = o.mode == "ring" ? flashattn::ring_bench::RunRing(o) : flashattn::ring_bench::RunDecode(o);
  } catch (const CLI::ParseError& error) {
    status = rank == 0 ? app.exit(error) : (error.get_exit_code() != 0);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "flashattn-ring: rank %d: %s\n", rank, error.what());
    status = 1;
  }
  MPI_Finalize();
  return status;
}
