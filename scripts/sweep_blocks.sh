#!/usr/bin/env bash
# The (Br, Bc) sweep of the fused kernel (docs/io.md, "The block sizes of the fused kernel"): speed and
# modelled traffic per block size, or (MEASURE=1) traffic measured with valgrind's cache simulator.
#
#   scripts/sweep_blocks.sh [BUILD_DIR] > docs/io_block_sweep.dat
#   MEASURE=1 scripts/sweep_blocks.sh [BUILD_DIR] > docs/io_block_traffic.dat
#
# Speed (default): for each "N d heads" line of SHAPES and each "Br Bc" line of BLOCKS (0 0 = the kernel's own
# choice), io_probe times REPEATS forward calls (float32, not causal, THREADS threads) after one warm-up and
# prints one line:
#   N d heads threads Br Bc median_ms median_cpu_ms gflops cpu_gflops model_bytes target
# gflops is at the median wall time; cpu_gflops per CPU time, FLOPs / (median process CPU s / threads), as
# `flashattn bench` reports it: on a machine shared with other jobs it is the figure to compare. Br and Bc
# are the sizes the kernel used (clamped to N). model_bytes is the fused model's traffic of the call.
#
# Traffic (MEASURE=1): one head, one thread, each (shape, block) line of MEASURE_SHAPES × MEASURE_BLOCKS under
# callgrind with the simulated caches of measure_io.sh (L1d and LL = this machine's L1d and per-core L2,
# unless D1/LL override them):
#   N d Br Bc model_bytes counted_bytes measured_bytes instructions target
# (on valgrind's AVX2 path; model and count restricted to the same target).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
SHAPES=${SHAPES:-"4096 128 8
4096 64 8
1024 128 8"}
MEASURE_SHAPES=${MEASURE_SHAPES:-"2048 128"}
BLOCKS=${BLOCKS:-"0 0
126 128
252 128
252 256
510 256
510 1024
1020 512
126 1024
252 512
768 512"}
MEASURE_BLOCKS=${MEASURE_BLOCKS:-"0 0
126 128
252 128
252 512
126 1024
510 1024
1020 512"}
REPEATS=${REPEATS:-5}
THREADS=${THREADS:-2}

if [[ ! -f $build/CMakeCache.txt ]]; then
  echo "sweep_blocks.sh: no $build/CMakeCache.txt; configure and build it first" >&2
  exit 1
fi
# The probe is a target of the build (scripts/CMakeLists.txt), linked with the library it measures.
cmake --build "$build" --target io_probe >/dev/null
probe=$build/scripts/io_probe
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

blocks_args() {  # $1 $2 = Br Bc; 0 0 = the kernel's choice
  if [[ $1 != 0 || $2 != 0 ]]; then echo "--blocks $1 $2"; fi
}

if [[ -z ${MEASURE:-} ]]; then
  echo "# N d heads threads Br Bc median_ms median_cpu_ms gflops cpu_gflops model_bytes target"
  echo "# io_probe fused N d --heads H --threads $THREADS [--blocks Br Bc] --time $REPEATS" \
    "(float32, not causal)"
  while read -r N d heads; do
    while read -r Br Bc; do
      # shellcheck disable=SC2046
      read -r _ model _ used_Br _ used_Bc _ _ < <("$probe" fused "$N" "$d" --heads "$heads" \
        $(blocks_args "$Br" "$Bc") --model)
      # shellcheck disable=SC2046
      read -r _ ms _ _ _ cpu_ms _ gflops _ cpu_gflops _ target < <("$probe" fused "$N" "$d" \
        --heads "$heads" --threads "$THREADS" $(blocks_args "$Br" "$Bc") --time "$REPEATS")
      echo "$N $d $heads $THREADS $used_Br $used_Bc $ms $cpu_ms $gflops $cpu_gflops $model $target"
    done <<< "$BLOCKS"
  done <<< "$SHAPES"
  exit 0
fi

command -v valgrind >/dev/null || { echo "sweep_blocks.sh: valgrind is not installed" >&2; exit 1; }
script=sweep_blocks.sh
# shellcheck source=scripts/simulated_caches.sh
source "$root/scripts/simulated_caches.sh"  # D1, LL
echo "# N d Br Bc model_bytes counted_bytes measured_bytes instructions target"
echo "# valgrind --tool=callgrind --cache-sim=yes --D1=$D1,64 --LL=$LL,64 --instr-atstart=no" \
  "--collect-atstart=no --toggle-collect=io_probe_forward io_probe fused N d [--blocks Br Bc]"
while read -r N d; do
  while read -r Br Bc; do
    # shellcheck disable=SC2046
    valgrind --tool=callgrind --cache-sim=yes --I1=32768,8,64 --D1="$D1",64 --LL="$LL",64 \
      --instr-atstart=no --collect-atstart=no --toggle-collect=io_probe_forward \
      --callgrind-out-file="$work/out" "$probe" fused "$N" "$d" $(blocks_args "$Br" "$Bc") \
      > "$work/probe" 2>/dev/null
    read -r _ _ _ used_Br _ used_Bc _ target < "$work/probe"
    # shellcheck disable=SC2046
    read -r _ model _ counted _ _ _ _ _ _ < <("$probe" fused "$N" "$d" $(blocks_args "$Br" "$Bc") \
      --target "$target" --report)
    # events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
    read -r measured instructions < <(awk '/^totals:/ { print ($9 + $10) * 64, $2 }' "$work/out")
    echo "$N $d $used_Br $used_Bc $model $counted $measured $instructions $target"
  done <<< "$MEASURE_BLOCKS"
done <<< "$MEASURE_SHAPES"
