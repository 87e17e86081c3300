#include "bench/report.h"

#include <cmath>
#include <cstdio>

namespace flashattn::bench {

double Row::Gflops() const { return timing.median_ms > 0 ? flops / (timing.median_ms * 1e-3) * 1e-9 : 0; }

double Row::PeakFraction() const { return peak_gflops > 0 ? Gflops() / peak_gflops : 0; }

std::optional<double> Row::BaselineGflops() const {
  if (!baseline || baseline->timing.median_ms <= 0) return std::nullopt;
  return flops / (baseline->timing.median_ms * 1e-3) * 1e-9;
}

std::optional<double> Row::SpeedupVsBaseline() const {
  if (!baseline || timing.median_ms <= 0) return std::nullopt;
  return baseline->timing.median_ms / timing.median_ms;
}

double Row::CpuGflops() const {
  const double cpu_s = timing.median_cpu_ms * 1e-3 / config.threads;
  return cpu_s > 0 ? flops / cpu_s * 1e-9 : 0;
}

double Row::CpuPeakFraction() const { return peak_cpu_gflops > 0 ? CpuGflops() / peak_cpu_gflops : 0; }

std::optional<double> Row::CpuSpeedupVsBaseline() const {
  if (!baseline || timing.median_cpu_ms <= 0) return std::nullopt;
  return baseline->timing.median_cpu_ms / timing.median_cpu_ms;
}

double Row::Gbps() const {
  return traffic && timing.median_ms > 0 ? traffic->bytes_read / (timing.median_ms * 1e-3) * 1e-9 : 0;
}

double Row::BandwidthFraction() const {
  return traffic && traffic->triad_gbs > 0 ? Gbps() / traffic->triad_gbs : 0;
}

double Row::ReadBandwidthFraction() const {
  return traffic && traffic->read_gbs > 0 ? Gbps() / traffic->read_gbs : 0;
}

std::optional<double> Row::BaselineGbps() const {
  if (!traffic || !baseline || baseline->timing.median_ms <= 0) return std::nullopt;
  return traffic->bytes_read / (baseline->timing.median_ms * 1e-3) * 1e-9;
}

std::optional<double> Row::SpeedupOverF16Cache() const {
  if (!traffic || !traffic->f16_cache_median_ms || timing.median_ms <= 0) return std::nullopt;
  return *traffic->f16_cache_median_ms / timing.median_ms;
}

std::optional<double> Row::SelectedOverDenseTopK() const {
  if (!traffic || !traffic->dense_top_k_median_ms || *traffic->dense_top_k_median_ms <= 0) return std::nullopt;
  return timing.median_ms / *traffic->dense_top_k_median_ms;
}

double Row::TokensPerSecond() const {
  if (config.mode != Mode::kServe || timing.median_ms <= 0) return 0;
  return static_cast<double>(TotalQueryRows(config)) / (timing.median_ms * 1e-3);
}

std::optional<double> Row::RooflineFraction() const {
  if (!traffic || !traffic->roofline || timing.median_ms <= 0) return std::nullopt;
  return traffic->roofline->ms() / timing.median_ms;
}

double CaseRounds::MedianMs() const {
  std::vector<double> medians;
  for (const Row& row : rows) medians.push_back(row.timing.median_ms);
  return Median(medians);
}

std::optional<double> CaseRounds::MedianRooflineFraction() const {
  std::vector<double> fractions;
  for (const Row& row : rows) {
    const std::optional<double> fraction = row.RooflineFraction();
    if (!fraction) return std::nullopt;
    fractions.push_back(*fraction);
  }
  if (fractions.empty()) return std::nullopt;
  return Median(fractions);
}

std::string JsonString(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned>(c));
          out += escaped;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

void JsonLine::Key(std::string_view key) {
  if (text_.size() > 1) text_ += ", ";
  text_ += JsonString(key);
  text_ += ": ";
}

JsonLine& JsonLine::Add(std::string_view key, std::string_view value) {
  Key(key);
  text_ += JsonString(value);
  return *this;
}

JsonLine& JsonLine::Add(std::string_view key, double value) {
  if (!std::isfinite(value)) return AddNull(key);
  Key(key);
  char number[32];
  std::snprintf(number, sizeof(number), "%.6g", value);
  text_ += number;
  return *this;
}

JsonLine& JsonLine::Add(std::string_view key, std::int64_t value) {
  Key(key);
  text_ += std::to_string(value);
  return *this;
}

JsonLine& JsonLine::Add(std::string_view key, bool value) {
  Key(key);
  text_ += value ? "true" : "false";
  return *this;
}

JsonLine& JsonLine::AddNull(std::string_view key) {
  Key(key);
  text_ += "null";
  return *this;
}

JsonLine& JsonLine::Add(std::string_view key, const std::vector<double>& values) {
  Key(key);
  text_ += "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    char number[32] = "null";
    if (std::isfinite(values[i])) std::snprintf(number, sizeof(number), "%.6g", values[i]);
    text_ += (i > 0 ? ", " : "") + std::string(number);
  }
  text_ += "]";
  return *this;
}

std::string ToJson(const Row& row) {
  const BenchCase& c = row.config;
  JsonLine json;
  json.Add("name", row.config.Name())
      .Add("mode", ToString(c.mode))
      .Add("algorithm", c.AlgorithmName())
      .Add("batch", c.batch)
      .Add("heads", c.heads)
      .Add("heads_kv", c.heads_kv)
      .Add("seqlen_q", c.seqlen_q)
      .Add("seqlen_k", c.seqlen_k)
      .Add("headdim", c.headdim)
      .Add("causal", c.causal)
      .Add("dtype", to_string(c.dtype))
      .Add("threads", c.threads);
  if (row.round) json.Add("round", *row.round);
  json.Add("runs", row.timing.runs)
      .Add("median_ms", row.timing.median_ms)
      .Add("min_ms", row.timing.min_ms)
      .Add("max_ms", row.timing.max_ms)
      .Add("gflops", row.Gflops())
      .Add("peak_gflops", row.peak_gflops)
      .Add("peak_target", row.peak_target)
      .Add("peak_fraction", row.PeakFraction())
      .Add("median_cpu_ms", row.timing.median_cpu_ms)
      .Add("cpu_gflops", row.CpuGflops())
      .Add("peak_cpu_gflops", row.peak_cpu_gflops)
      .Add("cpu_peak_fraction", row.CpuPeakFraction());
  if (row.baseline) {
    json.Add("baseline_median_ms", row.baseline->timing.median_ms)
        .Add("baseline_gflops", *row.BaselineGflops())
        .Add("baseline_arrangement", row.baseline->arrangement)
        .Add("baseline_blas_core", row.baseline->blas_core);
    for (const auto& [arrangement, median_ms] : row.baseline->medians_ms)
      json.Add("baseline_" + arrangement + "_median_ms", median_ms);
    json.Add("speedup_vs_baseline", *row.SpeedupVsBaseline())
        .Add("baseline_median_cpu_ms", row.baseline->timing.median_cpu_ms)
        .Add("cpu_speedup_vs_baseline", *row.CpuSpeedupVsBaseline());
  } else {
    json.AddNull("baseline_median_ms").AddNull("baseline_gflops").AddNull("baseline_arrangement")
        .AddNull("baseline_blas_core")
        .AddNull("speedup_vs_baseline").AddNull("baseline_median_cpu_ms").AddNull("cpu_speedup_vs_baseline");
  }
  if (row.traffic) {
    const Traffic& t = *row.traffic;
    json.Add("cache_len", c.seqlen_k)
        .Add("num_splits", t.num_splits)
        .Add("page_size", c.page_size)
        .Add("bytes_read", static_cast<std::int64_t>(t.bytes_read))
        .Add("gbps", row.Gbps())
        .Add("bandwidth_gbps", t.triad_gbs)
        .Add("bandwidth_fraction", row.BandwidthFraction())
        .Add("read_bandwidth_gbps", t.read_gbs)
        .Add("read_bandwidth_fraction", row.ReadBandwidthFraction())
        .Add("evicted_bytes_before_each_call", t.evicted_bytes)
        .Add("cache_dtype", c.cache_element == CacheElement::kFloat ? to_string(c.dtype) : to_string(c.cache_element));
    if (c.quantize_query) json.Add("quantize_query_int8", true);
    if (c.quantize_probs) json.Add("quantize_probs_u8", true);
    if (c.scale_group_size > 0) json.Add("scale_group_size", c.scale_group_size);
    if (c.cache_element != CacheElement::kFloat) {
      json.Add("scale_granularity", to_string(default_scale_granularity(c.cache_element, c.scale_group_size)));
    }
    if (t.f16_cache_median_ms) {
      json.Add("f16_cache_median_ms", *t.f16_cache_median_ms).Add("speedup_vs_f16_cache", *row.SpeedupOverF16Cache());
    }
    if (c.top_k > 0) json.Add("top_k", c.top_k);
    if (t.dense_top_k_median_ms) {
      json.Add("dense_top_k_median_ms", *t.dense_top_k_median_ms)
          .Add("selected_over_dense_top_k", *row.SelectedOverDenseTopK());
    }
    if (c.mode == Mode::kServe) {
      json.Add("decoding_seqs", c.batch)
          .Add("prefill_seqs", c.prefill_seqs)
          .Add("prefill_chunk", c.prefill_chunk)
          .Add("prefill_prefix", c.prefill_prefix)
          .Add("query_rows", TotalQueryRows(c))
          .Add("attended_keys", AttendedKeys(c))
          .Add("tokens_per_second", row.TokensPerSecond());
    }
    if (c.cache_len_min > 0) {
      json.Add("cache_len_min", c.cache_len_min)
          .Add("cache_len_max", c.seqlen_k)
          .Add("cache_len_seed", static_cast<std::int64_t>(c.seed))
          .Add("cache_keys_total", TotalCacheLength(c));
    }
    if (t.int8_dot_gops > 0) json.Add("int8_dot_peak_gops", t.int8_dot_gops);
    else json.AddNull("int8_dot_peak_gops");
    if (t.roofline) {
      json.Add("roofline_ms", t.roofline->ms())
          .Add("roofline_memory_ms", t.roofline->memory_ms)
          .Add("roofline_arithmetic_ms", t.roofline->arithmetic_ms)
          .Add("roofline_bound", ToString(t.roofline->bound))
          .Add("roofline_fraction", row.RooflineFraction().value_or(0));
    } else {
      json.AddNull("roofline_ms").AddNull("roofline_memory_ms").AddNull("roofline_arithmetic_ms")
          .AddNull("roofline_bound").AddNull("roofline_fraction");
    }
    if (row.baseline) json.Add("baseline_gbps", *row.BaselineGbps()).Add("baseline_cache", t.baseline_cache);
  }
  if (row.max_abs_diff_vs_baseline) json.Add("max_abs_diff_vs_baseline", *row.max_abs_diff_vs_baseline);
  json.Add("tensor_bytes", row.tensor_bytes);
  if (row.load_average) json.Add("load_average", *row.load_average);
  if (row.peak_rss_growth_bytes) json.Add("peak_rss_growth_bytes", *row.peak_rss_growth_bytes);
  if (!row.note.empty()) json.Add("note", row.note);
  return json.str();
}

std::string ToJson(const CaseRounds& rounds) {
  const BenchCase& c = rounds.rows.front().config;
  std::vector<double> medians, fractions, bandwidths;
  for (const Row& row : rounds.rows) {
    medians.push_back(row.timing.median_ms);
    fractions.push_back(row.RooflineFraction().value_or(std::nan("")));
    bandwidths.push_back(row.traffic ? row.traffic->read_gbs : std::nan(""));
  }
  JsonLine json;
  json.Add("summary", true)
      .Add("name", c.Name())
      .Add("mode", ToString(c.mode))
      .Add("rounds", static_cast<std::int64_t>(rounds.rows.size()))
      .Add("median_ms", rounds.MedianMs());
  if (const std::optional<double> fraction = rounds.MedianRooflineFraction())
    json.Add("median_roofline_fraction", *fraction);
  else
    json.AddNull("median_roofline_fraction");
  json.Add("median_ms_per_round", medians);
  if (c.mode == Mode::kDecode || c.mode == Mode::kServe) {
    json.Add("roofline_fraction_per_round", fractions).Add("read_bandwidth_gbps_per_round", bandwidths);
  }
  return json.str();
}

void PrintTableHeader(std::ostream& out) {
  char line[256];
  std::snprintf(line, sizeof(line),
                "%-8s %-9s %-4s %3s %4s %4s %6s %6s %4s %-6s %2s %10s %8s %6s %10s %-14s %7s | %8s %6s %7s",
                "mode", "algorithm", "type", "b", "h", "hkv", "Nq", "Nk", "d", "mask", "T", "median_ms",
                "GFLOP/s", "%peak", "base_ms", "base_threading", "speedup", "cpuGF/s", "cpu%pk", "cpu_spd");
  out << line << "\n";
}

void PrintTableRow(std::ostream& out, const Row& row) {
  const BenchCase& c = row.config;
  char base_ms[32] = "-", speedup[32] = "-", cpu_speedup[32] = "-";
  if (row.baseline) {
    std::snprintf(base_ms, sizeof(base_ms), "%.2f", row.baseline->timing.median_ms);
    std::snprintf(speedup, sizeof(speedup), "%.2fx", *row.SpeedupVsBaseline());
    std::snprintf(cpu_speedup, sizeof(cpu_speedup), "%.2fx", *row.CpuSpeedupVsBaseline());
  }
  char line[512];
  std::snprintf(
      line, sizeof(line),
      "%-8s %-9s %-4s %3lld %4lld %4lld %6lld %6lld %4lld %-6s %2d %10.2f %8.1f %5.1f%% %10s %-14s %7s | "
      "%8.1f %5.1f%% %7s",
      std::string(ToString(c.mode)).c_str(), c.AlgorithmName().c_str(),
      std::string(to_string(c.dtype)).c_str(), static_cast<long long>(c.batch),
      static_cast<long long>(c.heads), static_cast<long long>(c.heads_kv), static_cast<long long>(c.seqlen_q),
      static_cast<long long>(c.seqlen_k), static_cast<long long>(c.headdim), c.causal ? "causal" : "full",
      c.threads, row.timing.median_ms, row.Gflops(), 100 * row.PeakFraction(), base_ms,
      row.baseline ? row.baseline->arrangement.c_str() : "-", speedup, row.CpuGflops(),
      100 * row.CpuPeakFraction(), cpu_speedup);
  out << line;
  if (row.traffic) {
    char traffic[160];
    std::snprintf(traffic, sizeof(traffic),
                  "  %.1f GB/s = %.0f%% of triad %.1f GB/s, %.0f%% of read %.1f, splits %lld", row.Gbps(),
                  100 * row.BandwidthFraction(), row.traffic->triad_gbs, 100 * row.ReadBandwidthFraction(),
                  row.traffic->read_gbs, static_cast<long long>(row.traffic->num_splits));
    out << traffic;
    if (c.mode == Mode::kServe) {
      std::snprintf(traffic, sizeof(traffic), ", %lld decoding over %lld-%lld keys (seed %llu)",
                    static_cast<long long>(c.batch), static_cast<long long>(c.cache_len_min),
                    static_cast<long long>(c.seqlen_k), static_cast<unsigned long long>(c.seed));
      out << traffic;
      std::snprintf(traffic, sizeof(traffic), " + %lld x %lld rows over %lld keys: %lld rows, %lld keys, %.0f tok/s",
                    static_cast<long long>(c.prefill_seqs), static_cast<long long>(c.prefill_chunk),
                    static_cast<long long>(c.prefill_prefix), static_cast<long long>(TotalQueryRows(c)),
                    static_cast<long long>(TotalCacheLength(c)), row.TokensPerSecond());
      out << traffic;
    } else if (c.cache_len_min > 0) {
      std::snprintf(traffic, sizeof(traffic), ", cache lengths %lld-%lld (seed %llu, %lld keys)",
                    static_cast<long long>(c.cache_len_min), static_cast<long long>(c.seqlen_k),
                    static_cast<unsigned long long>(c.seed), static_cast<long long>(TotalCacheLength(c)));
      out << traffic;
    }
    if (row.traffic->roofline) {
      std::snprintf(traffic, sizeof(traffic), "; roofline %.2f ms (%s): %.0f%%", row.traffic->roofline->ms(),
                    std::string(ToString(row.traffic->roofline->bound)).c_str(), 100 * *row.RooflineFraction());
      out << traffic;
    }
    if (c.cache_element != CacheElement::kFloat) {
      const std::string groups = c.scale_group_size > 0 ? ", g " + std::to_string(c.scale_group_size) : "";
      std::snprintf(traffic, sizeof(traffic), "  %s cache%s%s%s", std::string(to_string(c.cache_element)).c_str(),
                    groups.c_str(), c.quantize_query ? ", int8 queries" : "",
                    c.quantize_probs ? ", u8 probabilities" : "");
      out << traffic;
    }
    if (row.traffic->f16_cache_median_ms) {
      std::snprintf(traffic, sizeof(traffic), ": %.2fx the speed of f16 (%.2f ms)", *row.SpeedupOverF16Cache(),
                    *row.traffic->f16_cache_median_ms);
      out << traffic;
    }
    if (row.traffic->dense_top_k_median_ms) {
      std::snprintf(traffic, sizeof(traffic), "  %lld selected keys: %.2fx the time of dense over %lld keys (%.3f ms)",
                    static_cast<long long>(c.top_k), *row.SelectedOverDenseTopK(), static_cast<long long>(c.top_k),
                    *row.traffic->dense_top_k_median_ms);
      out << traffic;
    }
  }
  if (row.peak_rss_growth_bytes) {
    char rss[64];
    std::snprintf(rss, sizeof(rss), "  peak RSS +%.2f MiB",
                  static_cast<double>(*row.peak_rss_growth_bytes) / (1 << 20));
    out << rss;
  }
  if (row.load_average) {
    char load[32];
    std::snprintf(load, sizeof(load), "  load %.1f", *row.load_average);
    out << load;
  }
  if (!row.note.empty()) out << "  (" << row.note << ")";
  out << "\n";
}

void PrintSummaryRow(std::ostream& out, const CaseRounds& rounds) {
  out << "summary " << rounds.rows.front().config.Name() << ": " << rounds.rows.size() << " rounds, median ";
  char text[64];
  std::snprintf(text, sizeof(text), "%.2f ms", rounds.MedianMs());
  out << text;
  if (const std::optional<double> fraction = rounds.MedianRooflineFraction()) {
    std::snprintf(text, sizeof(text), ", roofline fraction %.0f%%", 100 * *fraction);
    out << text;
  }
  out << " (rounds:";
  for (const Row& row : rounds.rows) {
    std::snprintf(text, sizeof(text), "%s %.2f ms", &row == &rounds.rows.front() ? "" : ",", row.timing.median_ms);
    out << text;
    if (const std::optional<double> fraction = row.RooflineFraction()) {
      std::snprintf(text, sizeof(text), " %.0f%%", 100 * *fraction);
      out << text;
    }
  }
  out << ")\n";
}

}  // namespace flashattn::bench
