#!/usr/bin/env bash
# Runs every performance target of docs/performance.md (forward, decode, backward) with `flashattn bench` (2 threads)
# and prints one JSON line per measurement, ROUNDS times over (medians over calls inside each line; compare
# rounds to see the machine's noise). Needs a quiet machine: it records the load average in every line.
#
#   scripts/perf_targets.sh [BUILD_DIR] > perf.jsonl        (ROUNDS=3 by default)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bench=("${1:-$root/build}/cli/flashattn" bench --json --threads 2)
rounds=${ROUNDS:-3}
forward=(--mode forward --batch 1 --heads 8 --seqlen 4096 --headdim 128)
for ((round = 1; round <= rounds; ++round)); do
  "${bench[@]}" "${forward[@]}"                                # ≥ 70% of peak, ≥ 1.3× OpenBLAS
  "${bench[@]}" "${forward[@]}" --causal --no-baseline         # causal ≤ 0.6× non-causal
  "${bench[@]}" "${forward[@]}" --dtype f16 --no-baseline      # f16 K/V no slower than f32
  "${bench[@]}" --mode decode --heads 32 --heads-kv 8 --cache-len 32768 --headdim 128 --dtype f16
  "${bench[@]}" --mode decode --heads 32 --heads-kv 8 --cache-len 32768 --headdim 128 --dtype f32
  "${bench[@]}" --mode decode --heads 8 --heads-kv 1 --cache-len 131072 --headdim 128 --dtype f16
  "${bench[@]}" --mode backward --batch 1 --heads 8 --seqlen 2048 --headdim 128   # ≥ 50% of peak, ≥ 1.3× OpenBLAS
  "${bench[@]}" --mode backward --batch 1 --heads 8 --seqlen 2048 --headdim 128 --causal --no-baseline
done
# Memory targets, once: forward N = 65536 (< 64 MiB), backward N = 32768 (< 128 MiB), one head.
"${bench[@]}" --mode forward --heads 1 --seqlen 65536 --headdim 128 --report-memory --no-baseline --repeats 1 --min-time 0
"${bench[@]}" --mode backward --heads 1 --seqlen 32768 --headdim 128 --report-memory --no-baseline --repeats 1 --min-time 0
