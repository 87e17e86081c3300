#include "common/cpu_caches.h"

#include <unistd.h>

#include <fstream>

namespace flashattn {

namespace {

// A sysfs size such as "32K", "1024K", "32768K", "1M" or "4096", in bytes; 0 if unreadable.
std::int64_t ReadSizeFile(const std::string& path) {
  std::ifstream file(path);
  std::int64_t value = 0;
  if (!(file >> value) || value <= 0) return 0;
  char unit = 0;
  file >> unit;
  if (unit == 'K') return value << 10;
  if (unit == 'M') return value << 20;
  if (unit == 'G') return value << 30;
  return value;
}

// The size of the data or unified cache of `level` under `dir`/index0 .. index7; 0 if none is listed.
std::int64_t SysfsCacheBytes(const std::string& dir, int level) {
  for (int index = 0; index < 8; ++index) {
    const std::string entry = dir + "/index" + std::to_string(index) + "/";
    std::ifstream level_file(entry + "level"), type_file(entry + "type");
    int found_level = 0;
    std::string type;
    if (!(level_file >> found_level) || !(type_file >> type)) continue;
    if (found_level != level || (type != "Data" && type != "Unified")) continue;
    const std::int64_t bytes = ReadSizeFile(entry + "size");
    if (bytes > 0) return bytes;
  }
  return 0;
}

// glibc's answer for the L2 or L3 (from CPUID on x86); 0 where it has none.
std::int64_t SysconfCacheBytes(int level) {
#if defined(_SC_LEVEL2_CACHE_SIZE) && defined(_SC_LEVEL3_CACHE_SIZE)
  const long bytes = sysconf(level == 2 ? _SC_LEVEL2_CACHE_SIZE : _SC_LEVEL3_CACHE_SIZE);
  return bytes > 0 ? bytes : 0;
#else
  (void)level;
  return 0;
#endif
}

CacheSize Detect(bool ask_sysconf, const std::string& sysfs_cache_dir, int level, std::int64_t default_bytes) {
  if (ask_sysconf) {
    if (const std::int64_t bytes = SysconfCacheBytes(level); bytes > 0) return {bytes, CacheSizeSource::kSysconf};
  }
  if (const std::int64_t bytes = SysfsCacheBytes(sysfs_cache_dir, level); bytes > 0) {
    return {bytes, CacheSizeSource::kSysfs};
  }
  return {default_bytes, CacheSizeSource::kDefault};
}

}  // namespace

CpuCaches DetectCpuCaches(bool ask_sysconf, const std::string& sysfs_cache_dir) {
  return {Detect(ask_sysconf, sysfs_cache_dir, 2, kDefaultL2Bytes),
          Detect(ask_sysconf, sysfs_cache_dir, 3, kDefaultL3Bytes)};
}

const CpuCaches& DetectedCpuCaches() {
  static const CpuCaches caches = DetectCpuCaches(true, "/sys/devices/system/cpu/cpu0/cache");
  return caches;
}

}  // namespace flashattn
