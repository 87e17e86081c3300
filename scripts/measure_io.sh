#!/usr/bin/env bash
# Measures the main-memory traffic of `standard` (the reference) and the fused kernel with valgrind's cache
# simulator, next to the IO model's bytes and the counted bytes of the same call.
#
#   scripts/measure_io.sh [BUILD_DIR] > docs/io_traffic.dat
#
# BUILD_DIR (default build) must be configured; the script builds its io_probe target there. Each output line
# is one call of one algorithm on one head, one thread, float32, LSE written:
#   algorithm N d LL_bytes model_bytes counted_bytes measured_bytes Br Bc simd_target
# measured_bytes = (LL data read misses + LL data write misses) × 64: the lines the simulated last-level
# cache fetched from memory during the forward call alone (callgrind instruments only io_probe_forward,
# --instr-atstart=no, so the simulated caches start empty). Write-backs of dirty lines are not simulated.
# model_bytes and counted_bytes (io_probe --report, run natively but restricted to the SIMD target valgrind
# ran, so that the panel padding is the same) are for the same call; counted_bytes is -1 when the counted
# run would exceed COUNT_MAX multiply-adds N²·2d (default 2^33, about a minute of scalar code).
#
# The simulated L1d is this machine's (from /sys/devices/system/cpu/cpu0/cache); the LL is its per-core L2,
# the fast memory M that the model and the kernel's blocks assume, unless LL="BYTES,WAYS" overrides it
# (e.g. LL=268435456,16 for a 256 MiB L3: valgrind needs a power-of-two number of sets). CONFIGS lists
# "algorithm N d" lines. Valgrind does not run AVX-512 code: the kernel runs its AVX2 path there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
COUNT_MAX=${COUNT_MAX:-8589934592}
CONFIGS=${CONFIGS:-"standard 256 128
standard 512 128
standard 1024 128
standard 512 64
standard 1024 64
fused 1024 128
fused 2048 128
fused 4096 128
fused 2048 64
fused 4096 64"}

command -v valgrind >/dev/null || { echo "measure_io.sh: valgrind is not installed" >&2; exit 1; }
if [[ ! -f $build/CMakeCache.txt ]]; then
  echo "measure_io.sh: no $build/CMakeCache.txt; configure and build it first" >&2
  exit 1
fi

script=measure_io.sh
# shellcheck source=scripts/simulated_caches.sh
source "$root/scripts/simulated_caches.sh"  # D1, LL

# The probe is a target of the build (scripts/CMakeLists.txt), linked with the library it measures.
cmake --build "$build" --target io_probe >/dev/null
probe=$build/scripts/io_probe
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "# algorithm N d LL_bytes model_bytes counted_bytes measured_bytes Br Bc simd_target"
echo "# valgrind --tool=callgrind --cache-sim=yes --D1=$D1,64 --LL=$LL,64 --instr-atstart=no" \
  "--collect-atstart=no --toggle-collect=io_probe_forward io_probe ALGORITHM N d"
while read -r algorithm N d; do
  [[ -z $algorithm ]] && continue
  valgrind --tool=callgrind --cache-sim=yes --I1=32768,8,64 --D1="$D1",64 --LL="$LL",64 \
    --instr-atstart=no --collect-atstart=no --toggle-collect=io_probe_forward \
    --callgrind-out-file="$work/out" "$probe" "$algorithm" "$N" "$d" > "$work/probe" 2>/dev/null
  read -r _ _ _ Br _ Bc _ target < "$work/probe"
  if (( N * N * 2 * d <= COUNT_MAX )); then
    read -r _ model _ counted _ _ _ _ _ _ < <("$probe" "$algorithm" "$N" "$d" --target "$target" \
      --report)
  else
    read -r _ model _ _ _ _ < "$work/probe"
    counted=-1
  fi
  # events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
  measured=$(awk '/^totals:/ { print ($9 + $10) * 64 }' "$work/out")
  echo "$algorithm $N $d ${LL%%,*} $model $counted $measured $Br $Bc $target"
done <<< "$CONFIGS"
