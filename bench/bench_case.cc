#include "bench/bench_case.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <numeric>
#include <random>
#include <sstream>

#include "support/fail.h"

namespace flashattn::bench {

std::string_view ToString(Mode mode) {
  switch (mode) {
    case Mode::kForward: return "forward";
    case Mode::kDecode: return "decode";
    case Mode::kBackward: return "backward";
    case Mode::kServe: return "serve";
    case Mode::kIndexer: return "indexer";
  }
  return "unknown";
}

Mode ParseMode(std::string_view name, std::string_view argument) {
  for (Mode mode : {Mode::kForward, Mode::kDecode, Mode::kBackward, Mode::kServe, Mode::kIndexer})
    if (name == ToString(mode)) return mode;
  support::Fail(argument, " must be one of forward, decode, backward, serve, indexer; got '", name, "'");
}

std::string_view ToString(Sparsity sparsity) {
  switch (sparsity) {
    case Sparsity::kNone: return "none";
    case Sparsity::kDocuments: return "documents";
    case Sparsity::kSlidingGlobal: return "sliding";
  }
  return "unknown";
}

Sparsity ParseSparsity(std::string_view name, std::string_view argument) {
  for (Sparsity sparsity : {Sparsity::kNone, Sparsity::kDocuments, Sparsity::kSlidingGlobal})
    if (name == ToString(sparsity)) return sparsity;
  support::Fail(argument, " must be one of none, documents, sliding; got '", name, "'");
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

CacheLenRange ParseCacheLen(std::string_view text, std::string_view argument) {
  const auto fail = [&] {
    support::Fail(argument, " must be N or A:B, integers with 1 <= A <= B <= 2147483647 (N >= 1); got '", text,
                  "'");
  };
  // A whole integer in [1, 2³¹ − 1], or fail
  const auto parse = [&](std::string_view digits) {
    std::int64_t value = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (digits.empty() || error != std::errc() || end != digits.data() + digits.size() || value < 1 ||
        value > std::int64_t{0x7fffffff})
      fail();
    return value;
  };
  const std::size_t colon = text.find(':');
  if (colon == std::string_view::npos) return {.min = 0, .max = parse(text)};
  const CacheLenRange range{.min = parse(text.substr(0, colon)), .max = parse(text.substr(colon + 1))};
  if (range.min > range.max) fail();
  return range;
}

namespace {

// Three integers "X:Y:Z", each in [0, 2³¹ − 1], or nullopt.
std::optional<std::array<std::int64_t, 3>> ParseTriple(std::string_view text) {
  std::array<std::int64_t, 3> values{};
  std::string_view rest = text;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::size_t colon = i + 1 < values.size() ? rest.find(':') : rest.size();
    if (colon == std::string_view::npos) return std::nullopt;
    const std::string_view digits = rest.substr(0, colon);
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), values[i]);
    if (digits.empty() || error != std::errc() || end != digits.data() + digits.size() || values[i] < 0 ||
        values[i] > std::int64_t{0x7fffffff})
      return std::nullopt;
    rest = rest.substr(std::min(rest.size(), colon + 1));
  }
  return values;
}

}  // namespace

ServeGroup ParseDecoding(std::string_view text, std::string_view argument) {
  const auto v = ParseTriple(text);
  if (!v || (*v)[0] < 1 || (*v)[1] < 1 || (*v)[1] > (*v)[2]) {
    support::Fail(argument, " must be N:A:B, N >= 1 sequences of one new row over a cache of A to B keys, "
                  "integers with 1 <= A <= B <= 2147483647; got '", text, "'");
  }
  return {.count = (*v)[0], .first = (*v)[1], .second = (*v)[2]};
}

ServeGroup ParsePrefilling(std::string_view text, std::string_view argument) {
  const auto v = ParseTriple(text);
  if (!v || (*v)[0] < 1 || (*v)[1] < 1 || (*v)[1] + (*v)[2] > std::int64_t{0x7fffffff}) {
    support::Fail(argument, " must be M:C:P, M >= 1 chunks of C >= 1 new rows over a cached prefix of P >= 0 "
                  "keys, C + P <= 2147483647; got '", text, "'");
  }
  return {.count = (*v)[0], .first = (*v)[1], .second = (*v)[2]};
}

std::string BenchCase::AlgorithmName() const {
  return algorithm ? std::string(to_string(*algorithm)) : std::string("default");
}

std::int64_t BenchCase::ScaleGroups() const { return scale_group_size > 0 ? headdim / scale_group_size : 1; }

namespace {

// "_cache_int8_quantize_query_quantize_probs_g32": a quantized cache's element, integer options and scale groups
// (nothing for a float cache).
std::string QuantizedCacheSuffix(const BenchCase& c) {
  if (c.cache_element == CacheElement::kFloat) return "";
  std::string suffix = "_cache_" + std::string(to_string(c.cache_element));
  if (c.quantize_query) suffix += "_quantize_query";
  if (c.quantize_probs) suffix += "_quantize_probs";
  if (c.scale_group_size > 0) suffix += "_g" + std::to_string(c.scale_group_size);
  return suffix;
}

}  // namespace

std::string BenchCase::Name() const {
  std::ostringstream s;
  if (mode == Mode::kServe) {
    s << "serve_" << to_string(dtype) << "_h" << heads << "_hkv" << heads_kv << "_d" << headdim;
    if (batch > 0) s << "_dec" << batch << "x" << cache_len_min << "-" << seqlen_k;
    if (prefill_seqs > 0) s << "_pre" << prefill_seqs << "x" << prefill_chunk << "+" << prefill_prefix;
    if (num_splits > 0) s << "_splits" << num_splits;
    s << "_paged" << page_size << (sinks ? "_sinks" : "") << QuantizedCacheSuffix(*this);
    if (batch > 0) s << "_seed" << seed;
    return s.str();
  }
  s << ToString(mode) << "_" << AlgorithmName() << "_" << to_string(dtype) << "_b" << batch << "_h" << heads
    << "_hkv" << heads_kv << "_nq" << seqlen_q << "_nk";
  if (cache_len_min > 0) s << cache_len_min << "-";
  s << seqlen_k << "_d" << headdim << (causal ? "_causal" : "");
  if (num_splits > 0) s << "_splits" << num_splits;
  if (page_size > 0) s << "_paged" << page_size;
  if (headdim_v) s << "_dv" << *headdim_v;
  if (top_k > 0) s << "_topk" << top_k;
  if (sinks) s << "_sinks";
  if (sparsity == Sparsity::kDocuments) s << "_docs8";
  if (sparsity == Sparsity::kSlidingGlobal) s << "_sliding512g64";
  s << QuantizedCacheSuffix(*this);
  if (cache_len_min > 0) s << "_seed" << seed;
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

std::vector<std::int64_t> CacheLengths(const BenchCase& c) {
  std::vector<std::int64_t> lengths(static_cast<std::size_t>(c.batch), c.seqlen_k);
  if (c.cache_len_min <= 0) return lengths;
  std::mt19937_64 random(c.seed);
  const std::uint64_t span = static_cast<std::uint64_t>(c.seqlen_k - c.cache_len_min + 1);
  for (std::int64_t& length : lengths) length = c.cache_len_min + static_cast<std::int64_t>(random() % span);
  return lengths;
}

std::vector<ServeSequence> ServeSequences(const BenchCase& c) {
  std::vector<ServeSequence> sequences;
  for (const std::int64_t length : CacheLengths(c)) sequences.push_back({.rows = 1, .keys = length});
  for (std::int64_t i = 0; i < c.prefill_seqs; ++i)
    sequences.push_back({.rows = c.prefill_chunk, .keys = c.prefill_prefix + c.prefill_chunk});
  return sequences;
}

std::int64_t TotalCacheLength(const BenchCase& c) {
  std::int64_t keys = 0;
  if (c.mode == Mode::kServe) {
    for (const ServeSequence& s : ServeSequences(c)) keys += s.keys;
    return keys;
  }
  const bool selected = c.mode == Mode::kDecode && c.top_k > 0;  // decode over top_k keys of each sequence
  for (const std::int64_t length : CacheLengths(c)) keys += selected ? std::min(c.top_k, length) : length;
  return keys;
}

std::int64_t TotalQueryRows(const BenchCase& c) {
  if (c.mode != Mode::kServe) return c.batch * c.seqlen_q;
  return c.batch + c.prefill_seqs * c.prefill_chunk;
}

double AttendedKeys(const BenchCase& c) {
  if (c.mode != Mode::kServe) return static_cast<double>(c.seqlen_q) * static_cast<double>(TotalCacheLength(c));
  double keys = 0;
  for (const std::int64_t length : CacheLengths(c)) keys += static_cast<double>(length);
  // a chunk's row i sees the prefix and rows 0..i: C·P + C(C+1)/2 per chunk
  const double chunk = static_cast<double>(c.prefill_chunk);
  keys += static_cast<double>(c.prefill_seqs) *
          (chunk * static_cast<double>(c.prefill_prefix) + chunk * (chunk + 1) / 2);
  return keys;
}

DecodeFlops CountDecodeFlops(const BenchCase& c) {
  const double rows_by_keys = 2.0 * static_cast<double>(c.heads) * AttendedKeys(c);
  return {.scores = rows_by_keys * static_cast<double>(c.headdim),
          .pv = rows_by_keys * static_cast<double>(c.headdim_v.value_or(c.headdim))};
}

double CountFlops(const BenchCase& c) {
  if (c.mode == Mode::kIndexer) {
    // Row t of Nq sees min(Nk, Nk − Nq + t + 1) keys when causal (bottom-right), else Nk.
    double seen = 0;
    for (std::int64_t t = 0; t < c.seqlen_q; ++t) {
      seen += static_cast<double>(c.causal ? std::clamp<std::int64_t>(c.seqlen_k - c.seqlen_q + t + 1, 0, c.seqlen_k)
                                           : c.seqlen_k);
    }
    return 2.0 * static_cast<double>(c.batch) * static_cast<double>(c.heads) * static_cast<double>(c.headdim) * seen;
  }
  if (c.mode == Mode::kDecode || c.mode == Mode::kServe) {
    const DecodeFlops flops = CountDecodeFlops(c);
    return flops.scores + flops.pv;
  }
  const double dense = 2.0 * static_cast<double>(c.batch) * static_cast<double>(c.heads) *
                       static_cast<double>(c.seqlen_q) * static_cast<double>(c.seqlen_k) *
                       static_cast<double>(c.headdim + c.headdim_v.value_or(c.headdim));
  return c.mode == Mode::kBackward ? 2.5 * (c.causal ? dense / 2 : dense) : (c.causal ? dense / 2 : dense);
}

double CountBytesRead(const BenchCase& c) {
  if (c.mode != Mode::kDecode && c.mode != Mode::kServe) return 0;
  const double element = static_cast<double>(size_of(c.dtype));
  const double query_rows = static_cast<double>(TotalQueryRows(c) * c.heads);
  const double q_and_o = query_rows * static_cast<double>(c.headdim + c.headdim_v.value_or(c.headdim)) * element;
  // Selected keys: each query row reads its own.
  const double rows = static_cast<double>(TotalCacheLength(c)) * static_cast<double>(c.heads_kv) *
                      static_cast<double>(c.top_k > 0 ? c.seqlen_q : 1);
  const double caches = c.headdim_v ? 1.0 : 2.0;  // V inside K: K's row, values and scales alone
  if (c.cache_element == CacheElement::kFloat) {
    return caches * rows * static_cast<double>(c.headdim) * element + q_and_o;
  }
  const bool per_token = default_scale_granularity(c.cache_element, c.scale_group_size) == ScaleGranularity::kPerToken;
  const double scale_bytes =
      per_token ? 4.0 * rows * static_cast<double>(c.ScaleGroups()) : 4.0 * static_cast<double>(c.heads_kv);
  return caches * (rows * static_cast<double>(c.headdim) + scale_bytes) + q_and_o;
}

}  // namespace flashattn::bench
