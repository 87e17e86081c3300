#!/usr/bin/env bash
# The (Br, Bc) sweep of the fused kernel: single-threaded median time and modelled traffic per block size.
#
#   scripts/sweep_blocks.sh [BUILD_DIR] > docs/io_block_sweep.dat
#
# Output lines: N d Br Bc median_ms min_ms GFLOP/s(at min_ms) model_bytes. Set MEASURE=1 to add the cachegrind-measured bytes
# (LL = 512 KiB, as in measure_io.sh; slow). SHAPES and BLOCKS override the grids.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-io}
SHAPES=${SHAPES:-"1024 64
1024 128"}
BLOCKS=${BLOCKS:-"16 256
32 256
64 256
128 256
64 64
64 128
64 512
64 1024
128 128
128 512
256 256"}
REPEATS=${REPEATS:-21}
# Compile the probe against the sources the library was built from: headers of another checkout may lay
# AttentionParams out differently.
src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
g++ -std=c++20 -O2 -fopenmp -I "$src/include" -I "$src/src" "$root/scripts/io_probe.cc" "$build/libflashattn.a" \
  -lhwy_contrib -lhwy -o "$work/io_probe"

echo "# N d Br Bc median_ms min_ms GFLOP/s model_bytes${MEASURE:+ measured_bytes}"
while read -r N d; do
  while read -r Br Bc; do
    read -r _ ms _ min_ms < <("$work/io_probe" fused "$N" "$d" --blocks "$Br" "$Bc" --time "$REPEATS")
    read -r _ model _ _ _ _ _ _ _ _ < <("$work/io_probe" fused "$N" "$d" --blocks "$Br" "$Bc")
    gflops=$(awk -v N="$N" -v d="$d" -v ms="$min_ms" 'BEGIN { printf "%.1f", 4 * N * N * d / (ms * 1e6) }')
    line="$N $d $Br $Bc $ms $min_ms $gflops $model"
    if [[ -n ${MEASURE:-} ]]; then
      valgrind --tool=callgrind --cache-sim=yes --I1=32768,8,64 --D1=32768,8,64 --LL=524288,8,64 \
        --collect-atstart=no --toggle-collect=io_probe_forward --callgrind-out-file="$work/out" \
        "$work/io_probe" fused "$N" "$d" --blocks "$Br" "$Bc" > /dev/null 2>&1
      line="$line $(awk '/^totals:/ { print ($9 + $10) * 64 }' "$work/out")"
    fi
    echo "$line"
  done <<< "$BLOCKS"
done <<< "$SHAPES"
