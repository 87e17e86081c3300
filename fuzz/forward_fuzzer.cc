// libFuzzer target: flashattn::forward over its whole parameter space at small sizes (b ≤ 3, Hq ≤ 9,
// Nq, Nk ≤ 40, d, dv ≤ 70): layouts and padding, broadcast inputs, causal, windows, softcap, ALiBi, mask
// tensors with broadcast and transposed strides, dropout, scale, tiling, threads, every algorithm and dtype,
// every compiled SIMD target (simd_target.h); and now and then one invalid value. A valid call must match
// the float64 oracle (oracle_check.h), write nothing outside O and LSE and leave its inputs alone; an
// invalid one must throw flashattn::Error and leave every byte the caller owns as it was.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "call_check.h"
#include "flashattn/flashattn.h"
#include "fuzz_input.h"
#include "fuzz_tensor.h"
#include "oracle_check.h"
#include "simd_target.h"
#include "reference/reference.h"

namespace flashattn::fuzz {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

struct ForwardCall {
  AttentionParams params;
  Algorithm algorithm = Algorithm::kFused;
  Tensor q, k, v, o;
  std::vector<float> lse, alibi, mask_additive;
  std::vector<std::uint8_t> mask_bool;
  std::string invalid;  // the injected invalid value, if any
};

// The mask tensor (batch, Hq, Nq, Nk): row-major, transposed or broadcast over rows, and broadcast over
// batch and heads or not.
void DrawMask(FuzzInput& in, Rng& rng, ForwardCall& call) {
  AttentionParams& p = call.params;
  const MaskKind kind = in.Pick({MaskKind::kBool, MaskKind::kAdditive});
  const std::int64_t plane = p.seqlen_q * p.seqlen_k;
  MaskTensor mask{kind, nullptr, in.Bool() ? 0 : p.heads_q * plane, in.Bool() ? 0 : plane, p.seqlen_k, 1};
  switch (in.Range(0, 2)) {
    case 1: mask.stride_row = 1, mask.stride_col = p.seqlen_q; break;  // stored (Nk, Nq)
    case 2: mask.stride_row = 0; break;                                // one row for every query
    default: break;
  }
  std::int64_t elements = 0;
  if (p.batch > 0 && p.seqlen_q > 0 && p.seqlen_k > 0) {
    elements = 1 + (p.batch - 1) * mask.stride_batch + (p.heads_q - 1) * mask.stride_head +
               (p.seqlen_q - 1) * mask.stride_row + (p.seqlen_k - 1) * mask.stride_col;
  }
  const float keep = in.Pick({0.8f, 0.3f, 0.02f});
  if (kind == MaskKind::kBool) {
    call.mask_bool.resize(elements);
    for (auto& m : call.mask_bool) m = rng.Uniform() < keep;
    mask.data = call.mask_bool.empty() ? nullptr : call.mask_bool.data();
  } else {
    const float bias = in.Pick({1.0f, 8.0f});
    call.mask_additive.resize(elements);
    for (auto& m : call.mask_additive) m = rng.Uniform() < keep ? bias * rng.Symmetric() : -kInf;
    mask.data = call.mask_additive.empty() ? nullptr : call.mask_additive.data();
  }
  p.mask = mask;
}

// One value the API must reject, applied to a call whose buffers stay as they were drawn. Returns what was
// done, or "" if the chosen kind does not apply to this call (e.g. a null pointer for an empty tensor).
std::string InjectInvalid(FuzzInput& in, ForwardCall& call) {
  AttentionParams& p = call.params;
  const bool o_nonempty = !call.o.Empty(), lse_nonempty = p.batch * p.heads_q * p.seqlen_q > 0;
  switch (in.Range(0, 22)) {
    case 0: p.batch = -in.Range(1, 3); return "negative batch";
    case 1: p.seqlen_q = -1; return "negative seqlen_q";
    case 2: p.seqlen_k = -in.Range(1, 5); return "negative seqlen_k";
    case 3: p.heads_kv = p.heads_q + 1; return "heads_q not a multiple of heads_kv";
    case 4: p.head_dim = in.Pick<std::int64_t>({0, -3, kMaxHeadDim + 1, 1 << 20}); return "head_dim out of range";
    case 5: p.head_dim_v = in.Pick<std::int64_t>({0, -1, kMaxHeadDim + 1}); return "head_dim_v out of range";
    case 6: p.window_left = in.Pick<std::int64_t>({-2, -100, INT64_MIN}); return "window_left below -1";
    case 7: p.window_right = -2; return "window_right below -1";
    case 8: p.softcap = in.Pick({-1.0f, kNaN, kInf}); return "softcap negative or not finite";
    case 9: p.scale = in.Pick({kNaN, kInf, -kInf}); return "scale not finite";
    case 10: p.dropout_p = in.Pick({-0.1f, 1.0f, 1.5f, kNaN}); return "dropout_p outside [0, 1)";
    case 11: p.alibi_batch_stride = p.heads_q > 1 ? p.heads_q - 1 : -1; return "alibi_batch_stride in (0, Hq)";
    case 12: p.num_threads = in.Pick({-1, 1025, std::numeric_limits<int>::max()}); return "num_threads";
    case 13:
      if (call.q.Empty()) return "";
      p.q = nullptr;
      return "null q";
    case 14:
      if (call.q.Empty() || !o_nonempty) return "";
      p.o = call.q.data();
      return "o overlapping q";
    case 15:
      if (call.o.sizes[1] < 2 || call.o.sizes[2] < 2 || !o_nonempty) return "";
      p.o_strides.seq = 0;
      return "o overlapping itself";
    case 16: p.k_strides.seq = -in.Range(1, 4); return "negative stride";
    case 17:
      if (!o_nonempty || !lse_nonempty) return "";
      p.lse = static_cast<float*>(call.o.data());
      return "lse overlapping o";
    case 18: p.tiling.block_rows = -1; return "negative tiling.block_rows";
    case 19: p.dtype = static_cast<DType>(in.Range(3, 255)); return "unknown dtype";
    case 20: p.mask.kind = static_cast<MaskKind>(in.Range(3, 255)); return "unknown mask kind";
    case 21:
      if (!o_nonempty) return "";
      p.batch = std::int64_t{1} << 62;  // O's furthest byte offset overflows int64
      return "batch whose O does not fit in 64-bit indexing";
    default:
      if (!o_nonempty) return "";
      p.seqlen_q = std::int64_t{1} << 62;
      return "seqlen_q whose O does not fit in 64-bit indexing";
  }
}

void DrawCall(FuzzInput& in, ForwardCall& call) {
  AttentionParams& p = call.params;
  p.dtype = in.Pick({DType::kF32, DType::kF16, DType::kBF16});
  p.batch = in.OneIn(16) ? 0 : in.Range(1, 3);
  p.seqlen_q = in.OneIn(16) ? 0 : in.Range(1, 40);
  p.seqlen_k = in.OneIn(16) ? 0 : in.Range(1, 40);
  p.heads_kv = in.Range(1, 3);
  p.heads_q = p.heads_kv * in.Range(1, 3);
  p.head_dim = in.Range(1, 70);
  if (in.Bool()) p.head_dim_v = in.Range(1, 70);
  const std::int64_t d = p.head_dim, dv = p.value_head_dim();
  call.algorithm = in.Pick({Algorithm::kFused, Algorithm::kFused, Algorithm::kFused, Algorithm::kFused,
                            Algorithm::kStandard, Algorithm::kFlash1, Algorithm::kFlash2, Algorithm::kOracle});

  p.causal = in.OneIn(3);
  if (in.OneIn(3)) p.window_left = in.Range(-1, 45);
  if (in.OneIn(3)) p.window_right = in.Range(-1, 45);
  if (in.OneIn(4)) p.softcap = in.Pick({0.5f, 5.0f, 30.0f});
  if (in.OneIn(3)) p.scale = in.Pick({0.0f, 0.05f, 0.3f, -0.3f, 1.0f, 4.0f});
  if (in.OneIn(8)) {
    p.dropout_p = in.Pick({0.1f, 0.5f, 0.9f});
    p.dropout_seed = in.U64();
    p.dropout_offset = in.Range(0, 1000);
  }
  if (in.OneIn(4)) {
    p.tiling.block_rows = in.Range(0, 64);
    p.tiling.block_cols = in.Range(0, 64);
  }
  if (in.OneIn(8)) p.tiling.fast_memory_bytes = in.Pick<std::int64_t>({16 * d, 16 * d + 1024, 65536});
  p.num_threads = static_cast<int>(in.Range(0, 3));

  const float input_scale = in.Pick({1.0f, 2.0f, 4.0f});
  call.q = DrawTensor(in, {p.batch, p.seqlen_q, p.heads_q, d}, p.dtype, /*input=*/true);
  call.k = DrawTensor(in, {p.batch, p.seqlen_k, p.heads_kv, d}, p.dtype, true);
  call.v = DrawTensor(in, {p.batch, p.seqlen_k, p.heads_kv, dv}, p.dtype, true);
  call.o = DrawTensor(in, {p.batch, p.seqlen_q, p.heads_q, dv}, p.dtype, /*input=*/false);
  const int alibi = static_cast<int>(in.Range(0, 3));
  const bool has_mask = in.OneIn(4);
  const bool want_lse = !in.OneIn(4);
  const bool inject = in.OneIn(4);

  Rng rng(in.U64());
  FillRandom(call.q, rng, input_scale);
  FillRandom(call.k, rng, input_scale);
  FillRandom(call.v, rng, 1.0f);
  p.q = call.q.data(), p.k = call.k.data(), p.v = call.v.data(), p.o = call.o.data();
  p.q_strides = call.q.strides, p.k_strides = call.k.strides, p.v_strides = call.v.strides;
  p.o_strides = call.o.strides;
  if (want_lse) {
    call.lse.resize(p.batch * p.heads_q * p.seqlen_q);
    std::fill_n(reinterpret_cast<unsigned char*>(call.lse.data()), call.lse.size() * sizeof(float), kPattern);
    p.lse = call.lse.empty() ? nullptr : call.lse.data();
  }
  if (alibi > 0) {  // 1: per head (Hq); 2, 3: per (batch, head), rows padded
    p.alibi_batch_stride = alibi == 1 ? 0 : p.heads_q + (alibi - 2);
    call.alibi.resize(alibi == 1 ? p.heads_q : p.batch * p.alibi_batch_stride);
    for (float& slope : call.alibi) slope = rng.Uniform() * (in.OneIn(4) ? -0.1f : 1.0f);
    p.alibi_slopes = call.alibi.empty() ? nullptr : call.alibi.data();
  }
  if (has_mask) DrawMask(in, rng, call);
  if (inject) call.invalid = InjectInvalid(in, call);
}

void Run(const std::uint8_t* data, std::size_t size) {
  FuzzInput in(data, size);
  ForwardCall call;
  DrawCall(in, call);
  const ScopedSimdTarget simd_target(in);
  const AttentionParams& p = call.params;
  const std::string what = std::string(to_string(call.algorithm)) + " " + std::string(to_string(p.dtype)) +
                           " on " + simd_target.Name() +
                           (call.invalid.empty() ? "" : " with " + call.invalid);

  const std::vector<unsigned char> q_before = call.q.bytes, k_before = call.k.bytes, v_before = call.v.bytes;
  const std::vector<float> alibi_before = call.alibi, mask_additive_before = call.mask_additive;
  const std::vector<std::uint8_t> mask_bool_before = call.mask_bool;
  const bool threw =
      CheckValidateAgreesWithCall(p, call.invalid, what, "forward", [&] { forward(p, call.algorithm); });
  if (call.q.bytes != q_before || call.k.bytes != k_before || call.v.bytes != v_before ||
      call.alibi != alibi_before || call.mask_additive != mask_additive_before ||
      call.mask_bool != mask_bool_before) {
    Fail(what + ": an input changed");
  }
  if (threw) {
    if (!AllPattern(call.o.bytes.data(), call.o.bytes.size()) ||
        !AllPattern(call.lse.data(), call.lse.size() * sizeof(float))) {
      Fail(what + ": a rejected call wrote to O or LSE");
    }
    return;
  }
  CheckNothingWrittenBetweenElements(call.o, what);
  // standard stores S and P in the element type; flash1 keeps O there between K/V blocks.
  Rounding rounding{.output = p.dtype};
  const double u_element = p.dtype == DType::kF16 ? 0x1p-11 : p.dtype == DType::kBF16 ? 0x1p-8 : 0x1p-24;
  if (call.algorithm == Algorithm::kStandard) rounding.stored_scores = u_element;
  if (call.algorithm == Algorithm::kFlash1) {
    const std::int64_t Bc = reference::ClampBlockSizes(reference::ChooseBlockSizes(p), p).Bc;
    rounding.output_roundings = 1 + (p.seqlen_k + Bc - 1) / Bc;
  }
  const std::string error = CheckAgainstOracle(p, rounding);
  if (!error.empty()) Fail(what + ": " + error);
}

}  // namespace
}  // namespace flashattn::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  flashattn::fuzz::Run(data, size);
  return 0;
}
