// VmHWM from /proc/self/status, reset through /proc/self/clear_refs (see proc(5)).
#include "measure/measure.h"

#include <charconv>
#include <fstream>
#include <sstream>
#include <string>

namespace flashattn::measure {

namespace {

std::string ReadStatus() {
  std::ifstream file("/proc/self/status");
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace

std::optional<std::int64_t> StatusFieldKib(std::string_view status, std::string_view key) {
  // Lines look like "VmHWM:\t  123456 kB".
  std::size_t line = 0;
  while (line < status.size()) {
    std::size_t end = status.find('\n', line);
    if (end == std::string_view::npos) end = status.size();
    const std::string_view text = status.substr(line, end - line);
    if (text.size() > key.size() && text.substr(0, key.size()) == key && text[key.size()] == ':') {
      std::size_t digits = text.find_first_of("0123456789", key.size() + 1);
      if (digits == std::string_view::npos) return std::nullopt;
      std::int64_t kib = 0;
      const auto [ptr, error] = std::from_chars(text.data() + digits, text.data() + text.size(), kib);
      if (error != std::errc()) return std::nullopt;
      return kib;
    }
    line = end + 1;
  }
  return std::nullopt;
}

PeakRssProbe::PeakRssProbe() {
  std::ofstream clear_refs("/proc/self/clear_refs");
  clear_refs << "5";
  clear_refs.flush();
  if (!clear_refs) return;
  const std::string status = ReadStatus();
  const auto rss = StatusFieldKib(status, "VmRSS");
  const auto hwm = StatusFieldKib(status, "VmHWM");
  if (!rss || !hwm) return;
  rss_at_reset_kib_ = *rss;
  available_ = true;
}

std::int64_t PeakRssProbe::PeakGrowthBytes() const {
  const auto hwm = StatusFieldKib(ReadStatus(), "VmHWM");
  if (!available_ || !hwm) return 0;
  return (*hwm - rss_at_reset_kib_) * 1024;
}

}  // namespace flashattn::measure
