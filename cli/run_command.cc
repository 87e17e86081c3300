// flashattn run: attention over .npy files in flash-attn's layout.
//
//   Q (batch, Nq, Hq, d), K (batch, Nk, Hkv, d), V (batch, Nk, Hkv, dv)  →  O (batch, Nq, Hq, dv)
//   optional LSE (batch, Hq, Nq) float32, optional ALiBi slopes (Hq) or (batch, Hq)
//
// Q, K and V are all float32 ('<f4') or all float16 ('<f2'); O has their dtype. Every check runs before
// any output exists, and outputs are written through PendingFile: on any error no output file is created
// and an existing one is left untouched.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "flashattn/flashattn.h"
#include "npy.h"
#include "output_file.h"
#include "support/fail.h"

namespace flashattn::cli {
namespace {

using support::Fail;

struct RunOptions {
  std::string q, k, v, out, lse, alibi, algorithm;
  bool causal = false;
  std::vector<std::int64_t> window;
  float softcap = 0.0f;
  double scale = 0.0;
  bool has_scale = false;
  int threads = 0;
};

npy::Array ReadArgument(const std::string& option, const std::string& path) {
  try {
    return npy::Read(path);
  } catch (const npy::NpyError& e) {
    Fail(option, ": ", e.what());
  }
}

// The (batch, seqlen, heads, dim) sizes of one input, checked for rank and dtype.
struct Tensor4 {
  std::int64_t batch, seqlen, heads, dim;
};

Tensor4 CheckInput(const std::string& option, const std::string& path, const npy::Array& array) {
  const auto& shape = array.shape();
  if (shape.size() != 4) {
    Fail(option, ": ", path, " has shape ", npy::ShapeString(shape),
         "; expected 4 dimensions (batch, seqlen, heads, dim)");
  }
  if (array.dtype() != npy::Dtype::kF32 && array.dtype() != npy::Dtype::kF16) {
    Fail(option, ": ", path, " has dtype '", npy::Descr(array.dtype()), "'; expected '<f4' or '<f2'");
  }
  const Tensor4 t{shape[0], shape[1], shape[2], shape[3]};
  if (t.heads < 1) Fail(option, ": ", path, " has shape ", npy::ShapeString(shape), " with no heads");
  if (t.dim < 1 || t.dim > kMaxHeadDim) {
    Fail(option, ": ", path, " has head dim ", t.dim, "; expected 1 to ", kMaxHeadDim);
  }
  return t;
}

// Checks the scalar options against the rules of docs/algorithms.md §6 with the option's name in the message
// (the library checks them again; these messages say which command-line argument was wrong).
void CheckScalars(const RunOptions& o) {
  if (o.window.size() == 2 && (o.window[0] < -1 || o.window[1] < -1)) {
    Fail("--window: left and right must be >= -1 (-1 = unbounded), got ", o.window[0], " ", o.window[1]);
  }
  if (!(o.softcap >= 0.0f) || !std::isfinite(o.softcap)) {
    Fail("--softcap: must be finite and >= 0 (0 disables it), got ", o.softcap);
  }
  if (o.has_scale && !std::isfinite(static_cast<float>(o.scale))) {
    Fail("--scale: must be finite as a float32, got ", o.scale);
  }
  if (o.threads < 0 || o.threads > 1024) {
    Fail("--threads: must be in [0, 1024] (0 = all cores), got ", o.threads);
  }
}

std::vector<float> ReadAlibi(const std::string& path, std::int64_t batch, std::int64_t heads_q,
                             std::int64_t* batch_stride) {
  const npy::Array array = ReadArgument("--alibi", path);
  const auto& shape = array.shape();
  const bool per_head = shape.size() == 1 && shape[0] == heads_q;
  const bool per_batch = shape.size() == 2 && shape[0] == batch && shape[1] == heads_q;
  if (!per_head && !per_batch) {
    Fail("--alibi: ", path, " has shape ", npy::ShapeString(shape), "; expected (", heads_q, ",) or (", batch,
         ", ", heads_q, ") for batch ", batch, " and ", heads_q, " query heads");
  }
  std::vector<float> slopes(static_cast<std::size_t>(array.NumElements()));
  if (array.dtype() == npy::Dtype::kF32) {
    std::copy_n(array.Data<float>(), slopes.size(), slopes.begin());
  } else if (array.dtype() == npy::Dtype::kF64) {
    for (std::size_t i = 0; i < slopes.size(); ++i) slopes[i] = static_cast<float>(array.Data<double>()[i]);
  } else {
    Fail("--alibi: ", path, " has dtype '", npy::Descr(array.dtype()), "'; expected '<f4' or '<f8'");
  }
  for (float slope : slopes) {
    if (!std::isfinite(slope)) Fail("--alibi: ", path, " holds a non-finite slope ", slope);
  }
  *batch_stride = per_batch ? heads_q : 0;
  return slopes;
}

bool SameFile(const std::string& a, const std::string& b) {
  std::error_code error;
  const auto ca = std::filesystem::weakly_canonical(std::filesystem::absolute(a), error);
  if (error) return a == b;
  const auto cb = std::filesystem::weakly_canonical(std::filesystem::absolute(b), error);
  return error ? a == b : ca == cb;
}

void Run(const RunOptions& o) {
  CheckScalars(o);
  std::optional<Algorithm> algorithm;
  if (!o.algorithm.empty()) algorithm = parse_algorithm(o.algorithm, "--algorithm");
  if (!o.lse.empty() && SameFile(o.out, o.lse)) Fail("--lse: names the same file as --out (", o.lse, ")");

  const npy::Array q = ReadArgument("--q", o.q), k = ReadArgument("--k", o.k), v = ReadArgument("--v", o.v);
  const Tensor4 tq = CheckInput("--q", o.q, q), tk = CheckInput("--k", o.k, k),
                tv = CheckInput("--v", o.v, v);
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype()) {
    Fail("--q, --k, --v: dtypes must agree, got '", npy::Descr(q.dtype()), "', '", npy::Descr(k.dtype()),
         "', '", npy::Descr(v.dtype()), "'");
  }
  const std::string shapes = " (q " + npy::ShapeString(q.shape()) + ", k " + npy::ShapeString(k.shape()) +
                             ", v " + npy::ShapeString(v.shape()) + ")";
  if (tk.batch != tq.batch || tv.batch != tq.batch) Fail("--q, --k, --v: batch sizes differ", shapes);
  if (tv.seqlen != tk.seqlen) Fail("--k, --v: sequence lengths differ", shapes);
  if (tv.heads != tk.heads) Fail("--k, --v: head counts differ", shapes);
  if (tq.heads % tk.heads != 0) {
    Fail("--q, --k: query heads ", tq.heads, " must be a multiple of key/value heads ", tk.heads, shapes);
  }
  if (tk.dim != tq.dim) Fail("--q, --k: head dims differ", shapes);

  AttentionParams p;
  p.batch = tq.batch;
  p.seqlen_q = tq.seqlen;
  p.seqlen_k = tk.seqlen;
  p.heads_q = tq.heads;
  p.heads_kv = tk.heads;
  p.head_dim = tq.dim;
  p.head_dim_v = tv.dim;
  p.dtype = q.dtype() == npy::Dtype::kF16 ? DType::kF16 : DType::kF32;
  p.set_contiguous_strides();
  p.causal = o.causal;
  if (o.window.size() == 2) {
    p.window_left = o.window[0];
    p.window_right = o.window[1];
  }
  p.softcap = o.softcap;
  if (o.has_scale) p.scale = static_cast<float>(o.scale);
  p.num_threads = o.threads;
  std::vector<float> slopes;
  if (!o.alibi.empty()) {
    slopes = ReadAlibi(o.alibi, p.batch, p.heads_q, &p.alibi_batch_stride);
    p.alibi_slopes = slopes.data();
  }

  npy::Array out(q.dtype(), {p.batch, p.seqlen_q, p.heads_q, tv.dim});
  npy::Array lse(npy::Dtype::kF32, {p.batch, p.heads_q, p.seqlen_q});
  p.q = q.data();
  p.k = k.data();
  p.v = v.data();
  p.o = out.data();
  if (!o.lse.empty()) p.lse = lse.Data<float>();
  validate(p);

  // Temporary files first, so that an unwritable destination fails before the computation.
  PendingFile out_file(o.out, "--out");
  std::unique_ptr<PendingFile> lse_file;
  if (!o.lse.empty()) lse_file = std::make_unique<PendingFile>(o.lse, "--lse");
  if (algorithm) {
    forward(p, *algorithm);
  } else {
    forward(p);
  }
  out_file.Write(npy::Encode(out));
  if (lse_file) lse_file->Write(npy::Encode(lse));
  out_file.Commit();
  if (lse_file) lse_file->Commit();
}

std::string AlgorithmNames() {
  std::string names;
  for (Algorithm algorithm : kAllAlgorithms)
    names += (names.empty() ? "" : ", ") + std::string(to_string(algorithm));
  return names;
}

}  // namespace

void AddRunCommand(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* run = app.add_subcommand("run",
                                     "Compute attention over .npy files in (batch, seqlen, heads, dim) "
                                     "layout, float32 '<f4' or float16 '<f2'");
  run->add_option("--q", o->q, "Queries Q (batch, Nq, Hq, d)")->required();
  run->add_option("--k", o->k, "Keys K (batch, Nk, Hkv, d); Hq must be a multiple of Hkv")->required();
  run->add_option("--v", o->v, "Values V (batch, Nk, Hkv, dv)")->required();
  run->add_option("--out", o->out, "Output O (batch, Nq, Hq, dv), same dtype as Q")->required();
  run->add_option("--lse", o->lse, "Also write the log-sum-exp of each row, float32 (batch, Hq, Nq)");
  run->add_flag("--causal", o->causal,
                "Causal mask aligned bottom-right: row i sees key j iff j <= i + Nk - Nq");
  run->add_option("--window", o->window, "Sliding window LEFT RIGHT around the diagonal (-1 = unbounded)")
      ->expected(2)
      ->allow_extra_args(false);
  run->add_option("--softcap", o->softcap, "Soft cap c > 0: S <- c*tanh(S/c) (0 disables it)");
  run->add_option("--scale", o->scale, "Softmax scale s (default 1/sqrt(d))")->each([o](const std::string&) {
    o->has_scale = true;
  });
  run->add_option("--alibi", o->alibi, "ALiBi slopes .npy, float32 or float64, shape (Hq,) or (batch, Hq)");
  run->add_option("--algorithm", o->algorithm, "One of: " + AlgorithmNames() + " (default: the library's)");
  run->add_option("--threads", o->threads, "Threads (0 = all cores)");
  run->callback([o] { Run(*o); });
}

}  // namespace flashattn::cli
