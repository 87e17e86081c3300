// VmHWM from /proc/self/status; reset through /proc/self/clear_refs (see proc(5)).
#include "peak_rss.h"

#include <fstream>
#include <sstream>
#include <string>

namespace flashattn::cli {

std::optional<std::int64_t> ResetPeakRss() {
  std::ofstream clear_refs("/proc/self/clear_refs");
  clear_refs << "5";
  clear_refs.close();
  if (!clear_refs) return std::nullopt;
  return PeakRss();  // right after the reset, VmHWM equals the current VmRSS
}

std::optional<std::int64_t> PeakRss() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) != 0) continue;
    std::istringstream fields(line.substr(6));
    std::int64_t kib = 0;
    if (fields >> kib) return kib * 1024;  // the line reads "VmHWM:   123456 kB"
  }
  return std::nullopt;
}

}  // namespace flashattn::cli
