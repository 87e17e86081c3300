#!/usr/bin/env bash
# Measures the main-memory traffic of `standard` (the reference) and the fused kernel with valgrind's
# cache simulator, next to the IO model's bytes (and the counted bytes of the instrumented reference).
#
#   scripts/measure_io.sh [BUILD_DIR] > docs/io_traffic.dat
#
# BUILD_DIR (default build-io) must hold a built libflashattn.a. Each line of the output is one call of one
# algorithm on one head, single-threaded (float32, LSE written):
#   algorithm N d LL_bytes model_bytes counted_bytes measured_bytes Br Bc simd_target
# measured_bytes = (LL data read misses + LL data write misses) × 64: the lines the simulated last-level
# cache fetched from memory, only inside the forward call (callgrind --toggle-collect), after the probe
# evicted the inputs from every cache. Write-backs of dirty lines are not simulated and not included.
# counted_bytes is -1 for the fused kernel, which is not instrumented.
#
# The simulated LL is 512 KiB, the per-core L2 the model's fast memory M stands for (override with LL=...);
# configurations listed in CONFIGS as "algorithm N d" lines (the default takes ~20 min on a quiet core).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-io}
LL=${LL:-524288}
CONFIGS=${CONFIGS:-"standard 128 64
standard 256 64
standard 512 64
standard 1024 64
standard 256 128
standard 512 128
fused 256 64
fused 512 64
fused 1024 64
fused 2048 64
fused 256 128
fused 512 128
fused 1024 128
fused 2048 128"}

command -v valgrind >/dev/null || { echo "measure_io.sh: valgrind is not installed" >&2; exit 1; }
[[ -f $build/libflashattn.a ]] || { echo "measure_io.sh: no $build/libflashattn.a; build the library first" >&2; exit 1; }
# Compile the probe against the sources the library was built from: headers of another checkout may lay
# AttentionParams out differently.
src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
g++ -std=c++20 -O2 -fopenmp -I "$src/include" -I "$src/src" "$root/scripts/io_probe.cc" "$build/libflashattn.a" \
  -lhwy_contrib -lhwy -o "$work/io_probe"

echo "# algorithm N d LL_bytes model_bytes counted_bytes measured_bytes Br Bc simd_target"
while read -r algorithm N d; do
  [[ -z $algorithm ]] && continue
  valgrind --tool=callgrind --cache-sim=yes --I1=32768,8,64 --D1=32768,8,64 --LL="$LL",8,64 \
    --collect-atstart=no --toggle-collect=io_probe_forward --callgrind-out-file="$work/out" \
    "$work/io_probe" "$algorithm" "$N" "$d" > "$work/probe" 2>/dev/null
  read -r _ model _ counted _ Br _ Bc _ target < "$work/probe"
  # events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
  measured=$(awk '/^totals:/ { print ($9 + $10) * 64 }' "$work/out")
  echo "$algorithm $N $d $LL $model $counted $measured $Br $Bc $target"
done <<< "$CONFIGS"
