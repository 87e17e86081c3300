// Peak resident memory of a call, for the memory targets (e.g. N = 65536, d = 128 must stay under 64 MiB
// beyond inputs and outputs). Linux only: writing 5 to /proc/self/clear_refs resets the high-water mark
// VmHWM to the current resident size, so VmHWM − VmRSS(at reset) after the call is the call's peak growth.
#ifndef FLASHATTN_BENCH_MEMORY_H_
#define FLASHATTN_BENCH_MEMORY_H_

#include <cstdint>
#include <optional>
#include <string_view>

namespace flashattn::bench {

// The value in KiB of field `key` ("VmHWM", "VmRSS") in the text of /proc/<pid>/status; nullopt if absent.
std::optional<std::int64_t> StatusFieldKib(std::string_view status, std::string_view key);

class PeakRssProbe {
 public:
  // Resets the high-water mark; available() is false when the kernel does not allow it.
  PeakRssProbe();
  bool available() const { return available_; }
  // Peak resident bytes above the resident size at construction, so far.
  std::int64_t PeakGrowthBytes() const;

 private:
  bool available_ = false;
  std::int64_t rss_at_reset_kib_ = 0;
};

}  // namespace flashattn::bench

#endif  // FLASHATTN_BENCH_MEMORY_H_
