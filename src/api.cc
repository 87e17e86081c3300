// The public entry points of the forward and backward passes, plain and varlen, and the small public helpers:
// each call is validated whole, once, then handed (for varlen: each of its sequences) to the chosen algorithm.
#include <cstdint>
#include <string>

#include "backward/backward.h"
#include "common/checked.h"
#include "common/dropout.h"
#include "flashattn/backward.h"
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

// The computations of validated calls.

void Compute(const AttentionParams& params, Algorithm algorithm) {
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
