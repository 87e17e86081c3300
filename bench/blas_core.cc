#include "bench/blas_core.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" char* openblas_get_corename(void);

namespace flashattn::bench {

std::string BlasCore() { return openblas_get_corename(); }

std::optional<std::string> BetterBlasCore(const std::string& chosen, bool avx512, bool avx2_fma) {
  // OpenBLAS's x86 families whose single-precision GEMM kernels predate AVX2.
  static const char* const kPreAvx2[] = {"Prescott",  "Core2",     "Penryn",   "Dunnington", "Nehalem",
                                         "Atom",      "Sandybridge", "Barcelona", "Opteron",  "Opteron_SSE3",
                                         "Bobcat",    "Bulldozer", "Piledriver", "Steamroller", "Excavator",
                                         "Katmai",    "Coppermine", "Northwood", "Banias",     "Generic"};
  const bool pre_avx2 = std::any_of(std::begin(kPreAvx2), std::end(kPreAvx2),
                                    [&](const char* family) { return chosen == family; });
  if (!pre_avx2) return std::nullopt;
  if (avx512) return "SkylakeX";
  if (avx2_fma) return "Haswell";
  return std::nullopt;
}

void RunOnBestBlasCore() {
#if defined(__x86_64__) || defined(__i386__)
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  const bool avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const std::optional<std::string> better = BetterBlasCore(BlasCore(), avx512, avx2_fma);
  if (!better) return;
  // The program's own arguments, NUL-separated in /proc/self/cmdline.
  std::ifstream cmdline("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (std::size_t begin = 0; begin < all.size();) {
    const std::size_t end = all.find('\0', begin);
    args.push_back(all.substr(begin, end - begin));
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  if (args.empty()) return;
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  setenv("OPENBLAS_CORETYPE", better->c_str(), 1);
  execv("/proc/self/exe", argv.data());
  unsetenv("OPENBLAS_CORETYPE");  // exec failed: carry on with the kernels OpenBLAS chose
#endif
}

}  // namespace flashattn::bench
