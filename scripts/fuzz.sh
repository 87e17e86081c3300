#!/usr/bin/env bash
# Builds the libFuzzer targets (preset `fuzz`: clang, ASan + UBSan, in build-asan/) and runs them all at
# once, side by side, for a bounded wall time, each from its committed seed corpus (fuzz/corpus/<target>/) and
# crash reproducers (fuzz/regressions/<target>/). New corpus entries go to a scratch directory; a crash, a
# failed check, a sanitizer report, a timeout or an out-of-memory stops that target's run with the input saved
# under build-asan/fuzz-artifacts/<target>/ and makes this script exit non-zero.
#   bash scripts/fuzz.sh                 # every target, 60 s (scripts/test.sh: 45 s)
#   FUZZ_SECONDS=600 bash scripts/fuzz.sh decode
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

seconds=${FUZZ_SECONDS:-60}
targets=("$@")
((${#targets[@]})) || targets=(forward decode npy)
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$(nproc)"

if command -v llvm-symbolizer >/dev/null; then
  export ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-$(command -v llvm-symbolizer)}
fi
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export KMP_HOT_TEAMS_MAX_LEVEL=0  # libomp 14's own leak, as in the sanitizer tests (tests/robustness.cmake)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# Runs one target; its output goes to $scratch/<target>.log, its exit status to $scratch/<target>.status.
run_target() {
  local target=$1 status=0
  local inputs=("$root/fuzz/corpus/$target")
  [[ -d $root/fuzz/regressions/$target ]] && inputs+=("$root/fuzz/regressions/$target")
  local artifacts=$root/build-asan/fuzz-artifacts/$target
  mkdir -p "$scratch/$target" "$artifacts"
  # -timeout: one input may take at most 20 s; -rss_limit_mb: the whole process at most 2 GiB (also the
  # largest single allocation libFuzzer allows).
  "$root/build-asan/fuzz/${target}_fuzzer" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" "$scratch/$target" "${inputs[@]}" \
    >"$scratch/$target.log" 2>&1 || status=$?
  echo "$status" >"$scratch/$target.status"
}

# The targets run side by side, all at once: each for the given wall time, sharing the cores.
echo "== fuzz: ${targets[*]} for ${seconds} s, side by side"
for target in "${targets[@]}"; do run_target "$target" & done
wait
status=0
for target in "${targets[@]}"; do
  echo "== fuzz: $target"
  if [[ $(cat "$scratch/$target.status") != 0 ]]; then
    tail -n 60 "$scratch/$target.log"
    echo "fuzz: $target FAILED; the input is in $root/build-asan/fuzz-artifacts/$target/" \
      "(keep it in fuzz/regressions/$target/ once fixed)" >&2
    status=1
  else
    grep -E "^(#[0-9]+.*DONE|stat::number_of_executed_units|stat::peak_rss_mb)" "$scratch/$target.log" || true
  fi
done
exit $status
