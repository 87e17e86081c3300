// Cache detection, and the ridge point from the two measurements of io_model/measure.h.
#include "io_model/machine.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "io_model/measure.h"

namespace flashattn::io_model {

namespace {

// Size in bytes of the level-`level` data or unified cache: sysconf's answer if it has one, else sysfs.
std::int64_t DetectCacheBytes(int level, long sysconf_name) {
  const long size = sysconf(sysconf_name);
  if (size > 0) return size;
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream level_file(dir + "level"), type_file(dir + "type"), size_file(dir + "size");
    int found_level = 0;
    std::string type, text;  // e.g. "Unified", "512K"
    const bool read = (level_file >> found_level) && (type_file >> type) && (size_file >> text);
    if (!read || found_level != level || type == "Instruction") continue;
    const std::int64_t value = std::stoll(text);
    const char unit = text.back();
    return unit == 'K' ? value << 10 : unit == 'M' ? value << 20 : value;
  }
  return 0;
}

}  // namespace

std::int64_t DetectL2CacheBytes() { return DetectCacheBytes(2, _SC_LEVEL2_CACHE_SIZE); }

std::int64_t DetectL3CacheBytes() { return DetectCacheBytes(3, _SC_LEVEL3_CACHE_SIZE); }

std::int64_t RidgeArrayBytes(std::int64_t l3_bytes) {
  return std::max<std::int64_t>(std::int64_t{128} << 20, 2 * l3_bytes);
}

Machine MeasureMachine(int threads) {
  Machine machine;
  machine.threads = threads > 0 ? threads : omp_get_max_threads();
  machine.fma_gflops = MeasureFmaPeak(machine.threads).cpu_gflops;
  machine.bandwidth_gbs =
      MeasureBandwidth(machine.threads, RidgeArrayBytes(DetectL3CacheBytes()), /*trials=*/10).read_gbs;
  return machine;
}

}  // namespace flashattn::io_model
