// Cache detection, and the ridge point from the two measurements of io_model/measure.h.
#include "io_model/machine.h"

#include <omp.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "io_model/measure.h"

namespace flashattn::io_model {

std::int64_t DetectL2CacheBytes() {
  const long size = sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (size > 0) return size;
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream level_file(dir + "level"), size_file(dir + "size");
    int level = 0;
    std::string text;  // e.g. "512K"
    if (!(level_file >> level) || level != 2 || !(size_file >> text)) continue;
    const std::int64_t value = std::stoll(text);
    const char unit = text.back();
    return unit == 'K' ? value << 10 : unit == 'M' ? value << 20 : value;
  }
  return 0;
}

Machine MeasureMachine(int threads) {
  Machine machine;
  machine.threads = threads > 0 ? threads : omp_get_max_threads();
  machine.fma_gflops = MeasureFmaPeak(machine.threads).cpu_gflops;
  machine.bandwidth_gbs = MeasureBandwidth(machine.threads).read_gbs;
  return machine;
}

}  // namespace flashattn::io_model
