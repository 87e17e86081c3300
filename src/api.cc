// The public entry points: validate once, then hand the call to the chosen algorithm.
#include <string>

#include "common/checked.h"
#include "flashattn/flashattn.h"
#include "forward/forward.h"
#include "reference/reference.h"

namespace flashattn {

std::string_view ToString(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
  }
  return "unknown";
}

std::size_t SizeOf(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }

std::string_view ToString(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kStandard: return "standard";
    case Algorithm::kFlash1: return "flash1";
    case Algorithm::kFlash2: return "flash2";
    case Algorithm::kFused: return "fused";
    case Algorithm::kOracle: return "oracle";
  }
  return "unknown";
}

Algorithm ParseAlgorithm(std::string_view name, std::string_view argument) {
  for (Algorithm algorithm : kAllAlgorithms) {
    if (name == ToString(algorithm)) return algorithm;
  }
  std::string names;
  for (Algorithm algorithm : kAllAlgorithms) names += (names.empty() ? "" : ", ") + std::string(ToString(algorithm));
  Fail(argument, " must be one of ", names, "; got '", name, "'");
}

void AttentionParams::SetContiguousStrides() {
  const std::int64_t dv = HeadDimV();
  q_strides = {seqlen_q * heads_q * head_dim, heads_q * head_dim, head_dim};
  k_strides = {seqlen_k * heads_kv * head_dim, heads_kv * head_dim, head_dim};
  v_strides = {seqlen_k * heads_kv * dv, heads_kv * dv, dv};
  o_strides = {seqlen_q * heads_q * dv, heads_q * dv, dv};
}

void AttentionParams::SetHeadMajorStrides() {
  const std::int64_t dv = HeadDimV();
  q_strides = {heads_q * seqlen_q * head_dim, head_dim, seqlen_q * head_dim};
  k_strides = {heads_kv * seqlen_k * head_dim, head_dim, seqlen_k * head_dim};
  v_strides = {heads_kv * seqlen_k * dv, dv, seqlen_k * dv};
  o_strides = {heads_q * seqlen_q * dv, dv, seqlen_q * dv};
}

void forward(const AttentionParams& params, Algorithm algorithm) {
  Validate(params);
  switch (algorithm) {
    case Algorithm::kStandard: return reference::Standard(params);
    case Algorithm::kFlash1: return reference::Flash1(params);
    case Algorithm::kFlash2: return reference::Flash2(params);
    case Algorithm::kFused: return forward_kernel::Forward(params);
    case Algorithm::kOracle: return reference::Oracle(params);
  }
  Fail("algorithm has an unknown value ", static_cast<int>(algorithm));
}

}  // namespace flashattn
