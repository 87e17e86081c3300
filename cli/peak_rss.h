// Peak resident memory of this process, from Linux's /proc: writing "5" to /proc/self/clear_refs resets the
// high-water mark VmHWM to the current resident size, so the growth of VmHWM over a call is the most
// extra memory the call had resident at any moment (heap, stacks of new threads, touched pages).
#ifndef FLASHATTN_CLI_PEAK_RSS_H_
#define FLASHATTN_CLI_PEAK_RSS_H_

#include <cstdint>
#include <optional>

namespace flashattn::cli {

// Resets the high-water mark and returns the resident size at that moment, in bytes (nullopt when /proc
// does not allow it).
std::optional<std::int64_t> ResetPeakRss();
// The high-water mark VmHWM in bytes (nullopt when /proc/self/status has no VmHWM line).
std::optional<std::int64_t> PeakRss();

}  // namespace flashattn::cli

#endif  // FLASHATTN_CLI_PEAK_RSS_H_
