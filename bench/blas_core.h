// Which OpenBLAS kernels the baselines run on. OpenBLAS 0.3.21 (Debian 12) does not recognize recent CPUs
// (an Intel Xeon of family 6 model 207, with AVX-512, for one) and falls back to its generic "Prescott"
// SSE3 kernels, 3-5x slower than its "SkylakeX" kernels on the same machine. A baseline on those kernels
// would flatter every speedup, so the benchmark runs OpenBLAS's best kernel family for the CPU whenever
// OpenBLAS chose a pre-AVX2 one for a CPU with AVX2 and the user did not choose with OPENBLAS_CORETYPE.
#ifndef FLASHATTN_BENCH_BLAS_CORE_H_
#define FLASHATTN_BENCH_BLAS_CORE_H_

#include <optional>
#include <string>

namespace flashattn::bench {

// The kernel family OpenBLAS runs on (openblas_get_corename), e.g. "SkylakeX", "Haswell", "Prescott".
std::string BlasCore();

// The family to ask for instead of `chosen`, on a CPU with these features: "SkylakeX" (AVX-512 F/BW/VL/DQ)
// or "Haswell" (AVX2 + FMA) when `chosen` is a family without AVX2 kernels; nothing when `chosen` stands.
std::optional<std::string> BetterBlasCore(const std::string& chosen, bool avx512, bool avx2_fma);

// When BetterBlasCore names a family for this CPU and OPENBLAS_CORETYPE is unset, sets it and re-executes
// the program with the same arguments (OpenBLAS reads it once, as the program loads); returns otherwise.
void RunOnBestBlasCore();

}  // namespace flashattn::bench

#endif  // FLASHATTN_BENCH_BLAS_CORE_H_
