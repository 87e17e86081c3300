#include "bench/bench_case.h"

#include <sstream>

#include "support/fail.h"

namespace flashattn::bench {

std::string_view ToString(Mode mode) {
  switch (mode) {
    case Mode::kForward: return "forward";
    case Mode::kDecode: return "decode";
    case Mode::kBackward: return "backward";
  }
  return "unknown";
}

Mode ParseMode(std::string_view name, std::string_view argument) {
  for (Mode mode : {Mode::kForward, Mode::kDecode, Mode::kBackward})
    if (name == ToString(mode)) return mode;
  support::Fail(argument, " must be one of forward, decode, backward; got '", name, "'");
}

DType ParseDType(std::string_view name, std::string_view argument) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16})
    if (name == to_string(dtype)) return dtype;
  support::Fail(argument, " must be one of f32, f16, bf16; got '", name, "'");
}

CacheElement ParseCacheElement(std::string_view name, std::string_view argument) {
  for (CacheElement element : {CacheElement::kInt8, CacheElement::kFp8E4M3, CacheElement::kFp8E5M2})
    if (name == to_string(element)) return element;
  support::Fail(argument, " must be one of int8, fp8_e4m3, fp8_e5m2; got '", name, "'");
}

std::string BenchCase::AlgorithmName() const {
  return algorithm ? std::string(to_string(*algorithm)) : std::string("default");
}

std::int64_t BenchCase::ScaleGroups() const { return scale_group_size > 0 ? headdim / scale_group_size : 1; }

std::string BenchCase::Name() const {
  std::ostringstream s;
  s << ToString(mode) << "_" << AlgorithmName() << "_" << to_string(dtype) << "_b" << batch << "_h" << heads
    << "_hkv" << heads_kv << "_nq" << seqlen_q << "_nk" << seqlen_k << "_d" << headdim
    << (causal ? "_causal" : "");
  if (num_splits > 0) s << "_splits" << num_splits;
  if (page_size > 0) s << "_paged" << page_size;
  if (headdim_v) s << "_dv" << *headdim_v;
  if (sinks) s << "_sinks";
  if (cache_element != CacheElement::kFloat) s << "_cache_" << to_string(cache_element);
  if (quantize_query) s << "_quantize_query";
  if (quantize_probs) s << "_quantize_probs";
  if (scale_group_size > 0) s << "_g" << scale_group_size;
  return s.str();
}

AttentionParams BenchCase::Params() const {
  AttentionParams p;
  p.batch = batch;
  p.seqlen_q = seqlen_q;
  p.seqlen_k = seqlen_k;
  p.heads_q = heads;
  p.heads_kv = heads_kv;
  p.head_dim = headdim;
  p.head_dim_v = headdim_v;
  p.dtype = dtype;
  p.causal = causal;
  p.num_threads = threads;
  p.set_contiguous_strides();
  return p;
}

double CountFlops(const BenchCase& c) {
  const double dense = 2.0 * static_cast<double>(c.batch) * static_cast<double>(c.heads) *
                       static_cast<double>(c.seqlen_q) * static_cast<double>(c.seqlen_k) *
                       static_cast<double>(c.headdim + c.headdim_v.value_or(c.headdim));
  switch (c.mode) {
    case Mode::kForward: return c.causal ? dense / 2 : dense;
    case Mode::kBackward: return 2.5 * (c.causal ? dense / 2 : dense);
    case Mode::kDecode: return dense;
  }
  return dense;
}

double CountBytesRead(const BenchCase& c) {
  if (c.mode != Mode::kDecode) return 0;
  const double rows = static_cast<double>(c.batch) * static_cast<double>(c.seqlen_k) * static_cast<double>(c.heads_kv);
  if (c.cache_element == CacheElement::kFloat) {
    const double row = static_cast<double>(c.headdim_v ? c.headdim : 2 * c.headdim);  // V inside K: one row
    return rows * row * static_cast<double>(size_of(c.dtype));
  }
  const bool per_token = default_scale_granularity(c.cache_element, c.scale_group_size) == ScaleGranularity::kPerToken;
  const double scale_bytes =
      per_token ? 4.0 * rows * static_cast<double>(c.ScaleGroups()) : 4.0 * static_cast<double>(c.heads_kv);
  return (c.headdim_v ? 1.0 : 2.0) * (rows * static_cast<double>(c.headdim) + scale_bytes);  // V inside K: K's
}

}  // namespace flashattn::bench
