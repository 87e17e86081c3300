// The public entry points of the forward and backward passes, plain and varlen, and the small public helpers:
// each call is validated whole, once, then handed (for varlen: each of its sequences) to the chosen algorithm;
// a forward call over selected keys to the decode kernel.
#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backward/backward.h"
#include "common/checked.h"
#include "common/dropout.h"
#include "common/score.h"
#include "decode/decode.h"
#include "flashattn/backward.h"
#include "flashattn/decode.h"
#include "flashattn/forward.h"
#include "flashattn/types.h"
#include "flashattn/varlen.h"
#include "forward/forward.h"
#include "reference/backward.h"
#include "reference/reference.h"
#include "validate.h"
#include "varlen/sequences.h"

namespace flashattn {

Error::~Error() = default;

std::string_view to_string(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
  }
  return "unknown";
}

std::size_t size_of(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }

std::string_view to_string(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kStandard: return "standard";
    case Algorithm::kFlash1: return "flash1";
    case Algorithm::kFlash2: return "flash2";
    case Algorithm::kFused: return "fused";
    case Algorithm::kOracle: return "oracle";
  }
  return "unknown";
}

Algorithm parse_algorithm(std::string_view name, std::string_view argument) {
  for (Algorithm algorithm : kAllAlgorithms) {
    if (name == to_string(algorithm)) return algorithm;
  }
  std::string names;
  for (Algorithm algorithm : kAllAlgorithms) names += (names.empty() ? "" : ", ") + std::string(to_string(algorithm));
  Fail(argument, " must be one of ", names, "; got '", name, "'");
}

void AttentionParams::set_contiguous_strides() {
  const std::int64_t dv = value_head_dim();
  q_strides = {seqlen_q * heads_q * head_dim, heads_q * head_dim, head_dim};
  k_strides = {seqlen_k * heads_kv * head_dim, heads_kv * head_dim, head_dim};
  v_strides = {seqlen_k * heads_kv * dv, heads_kv * dv, dv};
  o_strides = {seqlen_q * heads_q * dv, heads_q * dv, dv};
}

void AttentionParams::set_head_major_strides() {
  const std::int64_t dv = value_head_dim();
  q_strides = {heads_q * seqlen_q * head_dim, head_dim, seqlen_q * head_dim};
  k_strides = {heads_kv * seqlen_k * head_dim, head_dim, seqlen_k * head_dim};
  v_strides = {heads_kv * seqlen_k * dv, dv, seqlen_k * dv};
  o_strides = {heads_q * seqlen_q * dv, dv, seqlen_q * dv};
}

void BackwardParams::set_contiguous_strides() {
  attention.set_contiguous_strides();
  do_strides = attention.o_strides, dq_strides = attention.q_strides;
  dk_strides = attention.k_strides, dv_strides = attention.v_strides;
}

void BackwardParams::set_head_major_strides() {
  attention.set_head_major_strides();
  do_strides = attention.o_strides, dq_strides = attention.q_strides;
  dk_strides = attention.k_strides, dv_strides = attention.v_strides;
}

namespace {

// ---- Selected keys --------------------------------------------------------------------------------------------

// K and V of p copied side by side into *rows, each key's K/V head a row [K | V] of d + dv elements, contiguous
// (batch, Nk, Hkv, d + dv): the strides of that cache, whose V starts d elements in.
Strides CopySideBySide(const AttentionParams& p, std::vector<std::byte>* rows) {
  const std::int64_t d = p.head_dim, dv = p.value_head_dim(), Nk = p.seqlen_k, Hkv = p.heads_kv;
  const std::int64_t width = d + dv, bytes = static_cast<std::int64_t>(size_of(p.dtype));
  rows->resize(static_cast<std::size_t>(p.batch * Nk * Hkv * width * bytes));
  const Strides out{Nk * Hkv * width, Hkv * width, width};
  const auto copy = [&](const void* from, const Strides& s, std::int64_t features, std::int64_t at) {
#pragma omp parallel for collapse(2) num_threads(p.num_threads > 0 ? p.num_threads : omp_get_max_threads())
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t j = 0; j < Nk; ++j)
        for (std::int64_t hk = 0; hk < Hkv; ++hk) {
          std::memcpy(rows->data() + (b * out.batch + j * out.seq + hk * out.head + at) * bytes,
                      static_cast<const char*>(from) + (b * s.batch + j * s.seq + hk * s.head) * bytes,
                      static_cast<std::size_t>(features * bytes));
        }
  };
  copy(p.k, p.k_strides, d, 0);
  copy(p.v, p.v_strides, dv, d);
  return out;
}

// forward() over selected keys on the fused path: the decode kernel, which reads each row's own keys through its
// list, over K and V as a contiguous cache that holds every sequence whole (nothing appended). K and V with the
// same strides (or V inside the K rows) are read where they are; otherwise through CopySideBySide.
void ForwardSelectedKeys(const AttentionParams& p) {
  const std::int64_t Nk = p.seqlen_k;
  DecodeParams call;
  static_cast<HeadSettings&>(call) = p;
  call.q = p.q, call.o = p.o, call.lse = p.lse;
  call.q_strides = p.q_strides, call.o_strides = p.o_strides;
  call.batch = p.batch, call.seqlen_q = p.seqlen_q;
  call.cache_dtype = p.dtype, call.cache_seqlen_max = Nk;
  call.key_indices = p.key_indices;
  // No position is beyond INT32_MAX: a longer sequence's further keys are never read.
  const std::vector<std::int32_t> seqlens(static_cast<std::size_t>(p.batch),
                                          static_cast<std::int32_t>(std::min<std::int64_t>(Nk, INT32_MAX)));
  call.cache_seqlens = seqlens.data();
  // ALiBi's distances from each row's diagonal: a block position moves it by keys_after (validated to fit).
  const std::int64_t diagonal_shift = BlockPlacement::Of(p).DiagonalOffset() - (Nk - p.seqlen_q);
  const std::vector<std::int32_t> shift(static_cast<std::size_t>(p.batch), static_cast<std::int32_t>(diagonal_shift));
  if (p.alibi_slopes != nullptr) call.keys_after = shift.data();
  std::vector<std::byte> side_by_side;
  const bool same_layout = p.k_strides.batch == p.v_strides.batch && p.k_strides.seq == p.v_strides.seq &&
                           p.k_strides.head == p.v_strides.head;
  if (same_layout) {
    call.k_cache = const_cast<void*>(p.k), call.v_cache = const_cast<void*>(p.v);
    call.cache_strides = p.k_strides;
  } else {
    call.cache_strides = CopySideBySide(p, &side_by_side);
    call.k_cache = side_by_side.data();
    call.v_cache = side_by_side.data() + p.head_dim * static_cast<std::int64_t>(size_of(p.dtype));
  }
  decode_kernel::Decode(call, decode_kernel::KernelSequences{});
}

// A reference algorithm over selected keys: the same keys as a boolean mask tensor, (batch, Hq, Nq, Nk), each
// query head of a K/V head's group keeping its list.
void ComputeWithMaskOfSelectedKeys(const AttentionParams& p, Algorithm algorithm);

// The computations of validated calls.

void Compute(const AttentionParams& params, Algorithm algorithm) {
  if (params.key_indices.active()) {
    if (algorithm == Algorithm::kFused) return ForwardSelectedKeys(params);
    return ComputeWithMaskOfSelectedKeys(params, algorithm);
  }
  switch (algorithm) {
    case Algorithm::kStandard: return reference::Standard(params);
    case Algorithm::kFlash1: return reference::Flash1(params);
    case Algorithm::kFlash2: return reference::Flash2(params);
    case Algorithm::kFused: return forward_kernel::Forward(params);
    case Algorithm::kOracle: return reference::Oracle(params);
  }
  Fail("algorithm has an unknown value ", static_cast<int>(algorithm));
}

void Compute(const BackwardParams& params, BackwardAlgorithm algorithm) {
  switch (algorithm) {
    case BackwardAlgorithm::kStandard: return reference::StandardBackward(params);
    case BackwardAlgorithm::kFused: return backward_kernel::Backward(params);
    case BackwardAlgorithm::kOracle: return reference::OracleBackward(params);
  }
  Fail("algorithm has an unknown value ", static_cast<int>(algorithm));
}

void ComputeWithMaskOfSelectedKeys(const AttentionParams& p, Algorithm algorithm) {
  const std::int64_t Hq = p.heads_q, Nq = p.seqlen_q, Nk = p.seqlen_k, k = p.key_indices.count;
  const std::int64_t G = Hq / p.heads_kv;
  std::vector<std::uint8_t> keep(static_cast<std::size_t>(p.batch * Hq * Nq * Nk), 0);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t i = 0; i < Nq; ++i)
      for (std::int64_t h = 0; h < Hq; ++h) {
        const std::int32_t* list = p.key_indices.indices + ((b * Nq + i) * p.heads_kv + h / G) * k;
        for (std::int64_t slot = 0; slot < k; ++slot) {
          if (list[slot] >= 0) keep[static_cast<std::size_t>(((b * Hq + h) * Nq + i) * Nk + list[slot])] = 1;
        }
      }
  AttentionParams dense = p;
  dense.key_indices = {};
  dense.mask = {MaskKind::kBool, keep.data(), Hq * Nq * Nk, Nq * Nk, Nk, 1};
  Compute(dense, algorithm);
}

// keep[((b·Hq + h)·Nq + i)·Nk + j] = whether element (b, h, i, j) of P is kept.
void WriteKeepMask(const AttentionParams& params, std::uint8_t* keep) {
  const Dropout dropout(params);
  const std::int64_t Hq = params.heads_q, Nq = params.seqlen_q, Nk = params.seqlen_k;
  for (std::int64_t b = 0; b < params.batch; ++b)
    for (std::int64_t h = 0; h < Hq; ++h)
      for (std::int64_t i = 0; i < Nq; ++i)
        for (std::int64_t j = 0; j < Nk; ++j)
          keep[((b * Hq + h) * Nq + i) * Nk + j] = !dropout.Active() || dropout.Keep(b, h, i, j);
}

}  // namespace

void forward(const AttentionParams& params, Algorithm algorithm) {
  validate(params);
  Compute(params, algorithm);
}

void forward_varlen(const VarlenParams& params, Algorithm algorithm) {
  validate(params);
  varlen::ForEachSequence(params, varlen::LseUse::kWritten,
                          [algorithm](const AttentionParams& sequence) { Compute(sequence, algorithm); });
}

void backward(const BackwardParams& params, BackwardAlgorithm algorithm) {
  validate(params);
  Compute(params, algorithm);
}

void backward_varlen(const VarlenBackwardParams& params, BackwardAlgorithm algorithm) {
  validate(params);
  varlen::ForEachSequence(params, [algorithm](const BackwardParams& sequence) { Compute(sequence, algorithm); });
}

void materialize_dropout_mask(const AttentionParams& params, std::uint8_t* keep) {
  ValidateDropoutMask(params, keep);
  WriteKeepMask(params, keep);
}

void materialize_dropout_mask(const VarlenParams& params, std::uint8_t* keep) {
  ValidateDropoutMask(params, keep);
  varlen::ForEachSequence(params, varlen::LseUse::kNone, [&keep](const AttentionParams& sequence) {
    WriteKeepMask(sequence, keep);
    keep += sequence.heads_q * sequence.seqlen_q * sequence.seqlen_k;
  });
}

}  // namespace flashattn
