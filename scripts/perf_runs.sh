#!/usr/bin/env bash
# Measures the cases of docs/performance.md with `flashattn bench --json` and writes its tables and roofline plot:
#
#   bash scripts/perf_runs.sh [BUILD_DIR]         (default build/; ROUNDS=5 rounds of each case)
#
# The cases, on 2 threads (the machine's 2 cores), each for ROUNDS rounds (`--rounds`: the FMA peak and the
# bandwidth measured again in each round, medians over the rounds in the tables):
#   forward   batch 1, 8 heads, N 4096, d 128: f32 (beside the OpenBLAS baseline), causal f32, f16
#   backward  batch 1, 8 heads, N 2048, d 128: f32 (beside the OpenBLAS baseline), causal f32, f16
#   decode    `--preset decode-roofline` (docs/performance.md, "How it is measured")
# The JSON lines, after one line describing this machine's CPU (scripts/perf_results.py machine), replace
# docs/perf/<CPU kind>.jsonl; scripts/perf_plot.py and scripts/perf_table.py then redraw the plots and tables
# of every docs/perf/*.jsonl, so that results of other CPU kinds stay. Needs a quiet machine: every row
# records the load average. ONLY=forward|backward|decode runs one mode (replacing the file all the same).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
rounds=${ROUNDS:-5}
python=/usr/bin/python3  # Debian's, with python3-matplotlib (scripts/install-deps.sh)
flashattn=$build/cli/flashattn
[[ -x $flashattn ]] || { echo "perf_runs.sh: no $flashattn; build it first (bash scripts/demo.sh)" >&2; exit 1; }

bench=("$flashattn" bench --json --threads 2 --rounds "$rounds")
forward=(--mode forward --batch 1 --heads 8 --seqlen 4096 --headdim 128)
backward=(--mode backward --batch 1 --heads 8 --seqlen 2048 --headdim 128)

results=$(mktemp)
trap 'rm -f "$results"' EXIT
"$python" "$root/scripts/perf_results.py" machine >"$results"
run() {
  echo "perf_runs.sh: flashattn bench $*" >&2
  "${bench[@]}" "$@" >>"$results"
}
if [[ -z ${ONLY:-} || $ONLY == forward ]]; then
  run "${forward[@]}" --dtype f32
  run "${forward[@]}" --dtype f32 --causal --no-baseline
  run "${forward[@]}" --dtype f16 --no-baseline
fi
if [[ -z ${ONLY:-} || $ONLY == decode ]]; then
  run --preset decode-roofline
fi
if [[ -z ${ONLY:-} || $ONLY == backward ]]; then
  run "${backward[@]}" --dtype f32
  run "${backward[@]}" --dtype f32 --causal --no-baseline
  run "${backward[@]}" --dtype f16 --no-baseline
fi

mkdir -p "$root/docs/perf"
out=$root/docs/perf/$("$python" "$root/scripts/perf_results.py" slug "$results").jsonl
cat "$results" >"$out"  # not cp: the temporary file is private
echo "perf_runs.sh: wrote ${out#"$root"/}" >&2
"$python" "$root/scripts/perf_plot.py"   # first: the tables link the plots that exist
"$python" "$root/scripts/perf_table.py"
