#include "bench/roofline.h"

namespace flashattn::bench {

std::string_view ToString(RooflineBound bound) {
  switch (bound) {
    case RooflineBound::kBandwidth: return "bandwidth";
    case RooflineBound::kFma: return "fma";
    case RooflineBound::kInt8Dot: return "int8 dot";
    case RooflineBound::kMixed: return "mixed";
  }
  return "unknown";
}

std::optional<Roofline> DecodeRoofline(const BenchCase& c, const MachineLimits& limits) {
  const bool integer_scores = c.quantize_query;
  const bool integer_pv = c.quantize_probs && limits.integer_pv;
  const auto peak_gops = [&](bool integer) { return integer ? limits.int8_dot_gops : limits.fma_gflops; };
  if (limits.read_gbs <= 0 || peak_gops(integer_scores) <= 0 || peak_gops(integer_pv) <= 0) return std::nullopt;

  const DecodeFlops flops = CountDecodeFlops(c);
  Roofline roofline;
  roofline.memory_ms = CountBytesRead(c) / limits.read_gbs * 1e-6;  // bytes / (GB/s) = ns; ms = 1e-6 ns
  roofline.arithmetic_ms =
      (flops.scores / peak_gops(integer_scores) + flops.pv / peak_gops(integer_pv)) * 1e-6;
  if (roofline.memory_ms >= roofline.arithmetic_ms) roofline.bound = RooflineBound::kBandwidth;
  else if (integer_scores != integer_pv) roofline.bound = RooflineBound::kMixed;
  else roofline.bound = integer_scores ? RooflineBound::kInt8Dot : RooflineBound::kFma;
  return roofline;
}

}  // namespace flashattn::bench
