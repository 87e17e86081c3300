// Block sizes of the fused kernel from the per-core cache sizes (docs/fused_kernel.md, "Block sizes").
#include <algorithm>
#include <fstream>
#include <string>

#include "forward/forward.h"

namespace flashattn::forward_kernel {

namespace {

// Parses sysfs sizes such as "32K", "512K", "32768K" or "1M"; 0 if unreadable.
std::int64_t ReadCacheBytes(const std::string& path) {
  std::ifstream file(path);
  std::int64_t value = 0;
  char unit = 0;
  if (!(file >> value)) return 0;
  file >> unit;
  if (unit == 'K') value *= 1024;
  if (unit == 'M') value *= 1024 * 1024;
  return value;
}

std::string ReadWord(const std::string& path) {
  std::ifstream file(path);
  std::string word;
  file >> word;
  return word;
}

CacheSizes Detect() {
  CacheSizes sizes{32 * 1024, 512 * 1024};  // Zen 3 / most current x86 cores, when sysfs is unavailable
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    const std::string level = ReadWord(dir + "level"), type = ReadWord(dir + "type");
    const std::int64_t bytes = ReadCacheBytes(dir + "size");
    if (bytes <= 0) continue;
    if (level == "1" && (type == "Data" || type == "Unified")) sizes.l1d = bytes;
    if (level == "2" && (type == "Data" || type == "Unified")) sizes.l2 = bytes;
  }
  return sizes;
}

}  // namespace

const CacheSizes& DetectedCacheSizes() {
  static const CacheSizes sizes = Detect();  // immutable after the first (thread-safe) initialization
  return sizes;
}

FusedTiling ChooseFusedTiling(const AttentionParams& params) {
  const std::int64_t d = params.head_dim, dv = params.HeadDimV();
  // Starts from flash1's rule (docs/algorithms.md) with M = the per-core L2 in float32 elements,
  // Bc = ⌈M / 4·max(d, dv)⌉, and
  // adapts it to this kernel (docs/fused_kernel.md, "Block sizes"): half that Bc, a multiple of 32 keys
  // (whole panels of two vectors up to AVX-512) within [32, 512]; then the largest Br, a multiple of the
  // 6-row register tile, whose working set Br·(d + Bc + dv) [Q_i, S_ij, Õ] + Bc·(d + dv) [K_j, V_j] fits in M.
  // Long Q blocks mean fewer passes over K and V, which measured faster than flash1's Br = min(Bc, d).
  const std::int64_t M = DetectedCacheSizes().l2 / 4;
  const std::int64_t seed_Bc = (M + 4 * std::max(d, dv) - 1) / (4 * std::max(d, dv));
  std::int64_t Bc = std::clamp<std::int64_t>(seed_Bc / 2 / 32 * 32, 32, 512);
  std::int64_t Br = std::max<std::int64_t>((M - Bc * (d + dv)) / (d + Bc + dv), 6) / 6 * 6;
  if (params.tiling.block_rows > 0) Br = params.tiling.block_rows;
  if (params.tiling.block_cols > 0) Bc = params.tiling.block_cols;
  return {Br, Bc};
}

}  // namespace flashattn::forward_kernel
