// The sizes of this CPU's caches, read once from the operating system. The fused kernel sizes its blocks
// from the per-core L2 (src/kernels/tiling.cc); `flashattn io` takes the same L2 as its fast memory M and
// sizes its bandwidth arrays from the L3 (tools/io_model/machine.cc). One detection serves both, so the M
// the IO model reports is the M the kernel's tiles were chosen for.
#ifndef FLASHATTN_COMMON_CPU_CACHES_H_
#define FLASHATTN_COMMON_CPU_CACHES_H_

#include <cstdint>
#include <string>

namespace flashattn {

// Where a cache size came from.
enum class CacheSizeSource { kSysconf, kSysfs, kDefault };

struct CacheSize {
  std::int64_t bytes = 0;
  CacheSizeSource source = CacheSizeSource::kDefault;
  bool detected() const { return source != CacheSizeSource::kDefault; }
};

struct CpuCaches {
  CacheSize l2;  // per core
  CacheSize l3;  // last level, as the operating system reports it (sysconf: often the whole package's)
};

// The sizes used when neither sysconf nor sysfs reports a level: an AMD Zen 3 core (512 KiB L2, 32 MiB L3),
// the machine the kernel's block-size rule was first tuned on (docs/fused_kernel.md, "Block sizes").
inline constexpr std::int64_t kDefaultL2Bytes = std::int64_t{512} << 10;
inline constexpr std::int64_t kDefaultL3Bytes = std::int64_t{32} << 20;

// Each level from glibc's sysconf (_SC_LEVEL2_CACHE_SIZE, _SC_LEVEL3_CACHE_SIZE) when it answers with a
// positive size, else from the data or unified cache of that level under
// /sys/devices/system/cpu/cpu0/cache, else the default above. Read on the first call (thread-safe) and
// constant afterwards.
const CpuCaches& DetectedCpuCaches();

// The detection itself: sysconf only when `ask_sysconf`, then the index*/ directories of `sysfs_cache_dir`
// (files level, type and size, e.g. "2", "Unified", "1024K"), then the defaults. For tests.
CpuCaches DetectCpuCaches(bool ask_sysconf, const std::string& sysfs_cache_dir);

}  // namespace flashattn

#endif  // FLASHATTN_COMMON_CPU_CACHES_H_
