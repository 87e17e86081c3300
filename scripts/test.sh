#!/usr/bin/env bash
# README command 2: installs what is missing, then runs every test, in five parts (docs/robustness.md):
#   1. release   builds flashattn and every test (Release, in build/) and runs them all (ctest)
#   2. asan      the sanitizer subset under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/)
#   3. tsan      the threaded subset under ThreadSanitizer (build-tsan/)
#   4. fuzz      the libFuzzer targets side by side for FUZZ_SECONDS (45 here) from their corpora (build-asan/)
#   5. arm       the kernels' tests cross-built for AArch64 (build-arm/) and run under qemu-user on NEON and
#                SVE at 128, 256 and 512 bits (scripts/arm.sh, docs/arm.md)
# `scripts/test.sh --quick` is the daily loop instead: one part, a Release build for this CPU's best SIMD target
# only (build-quick/, kept between runs so that the next build is incremental) and its kernel, validation, C and
# Python tests; what it leaves out is listed at `quick()` below. CI runs the full command (.ci/run).
# Every part runs even if an earlier one failed; the command exits non-zero if any part failed, a test
# exceeded its time limit, a sanitizer reported anything or a fuzzer found an input that fails.
# Works from any directory. On 2 cores the whole run has to stay well under 30 minutes.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

mode=full
case ${1:-} in
  "") ;;
  --quick) mode=quick ;;
  *) echo "usage: scripts/test.sh [--quick]" >&2; exit 2 ;;
esac

bash "$root/scripts/install-deps.sh"

# Two test programs share the two cores (ctest -j2) and each runs OpenMP's threads: an idle thread that spins
# while it waits takes the other program's core. Waiting passively changes no thread count and no code path;
# on the Zen 3 it took the release tests but the two packaging ones from 170 to 139 s (CPU 300 to 239 s).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

# `&&`, not `set -e`: bash ignores -e inside a function whose status is tested (run_part's `||`).
release() {
  cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release &&
    cmake --build "$root/build" -j "$(nproc)" &&
    ctest --test-dir "$root/build" --output-on-failure -j2 --timeout 600
}

# The daily loop: one SIMD target (FLASHATTN_SIMD_TARGETS=native, cmake/simd_targets.cmake), neither
# flashattn::mpi nor the benchmarks (bench/, the probes of scripts/), and every test of that build but those
# that need more than one target, build the library again or install it:
#   test_targets_test                         checks the choice among several compiled targets
#   DecodeQuantized.IntegerPvAgreesOnEveryTarget  compares the int8 kernel between targets (a gtest filter)
#   install_consumer_shared, c_api_shared,    build a shared library of their own (c_api_static still runs
#   shared_library_exports                    the C API's tests from C)
#   python_pip_install_test                   builds and installs the wheel in fresh venvs
#   python_install_test                       installs the Python component into a staging root
#   configure_multi_config                    configures the whole project again with Ninja Multi-Config
# The full command runs all of them.
quick_excluded='^(test_targets_test|install_consumer_shared|c_api_shared|shared_library_exports'
quick_excluded+='|python_pip_install_test|python_install_test|configure_multi_config)$'
quick() {
  cmake -S "$root" -B "$root/build-quick" -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_SIMD_TARGETS=native \
    -DFLASHATTN_ENABLE_MPI=OFF -DFLASHATTN_ENABLE_BENCH=OFF &&
    cmake --build "$root/build-quick" -j "$(nproc)" &&
    GTEST_FILTER=-DecodeQuantized.IntegerPvAgreesOnEveryTarget \
      ctest --test-dir "$root/build-quick" --output-on-failure -j2 --timeout 600 -E "$quick_excluded"
}

# Sets cpu_seconds to the CPU time (user + system) of every finished child process so far: bash's `times`,
# run in this shell (in a subshell, such as $(...), it would count only the subshell's children).
times_file=$(mktemp)
trap 'rm -f "$times_file"' EXIT
read_cpu_seconds() {
  times >"$times_file"
  cpu_seconds=$(awk 'function secs(t) { split(t, a, /[ms]/); return a[1] * 60 + a[2] }
                     NR == 2 { printf "%d", secs($1) + secs($2) }' "$times_file")
}

summary=()
failed=0
run_part() {
  local name=$1 start=$SECONDS start_cpu status=0
  shift
  read_cpu_seconds
  start_cpu=$cpu_seconds
  echo "== test.sh: $name"
  "$@" || status=$?
  read_cpu_seconds
  local verdict=passed
  ((status == 0)) || verdict=FAILED failed=1
  summary+=("$(printf '%-8s %-6s %5d s wall %6d s CPU' "$name" "$verdict" $((SECONDS - start)) \
    $((cpu_seconds - start_cpu)))")
}

if [[ $mode == quick ]]; then
  run_part quick quick
else
  run_part release release
  run_part asan bash "$root/scripts/sanitize.sh" asan-ubsan
  run_part tsan bash "$root/scripts/sanitize.sh" tsan
  # 45 s here (scripts/fuzz.sh alone: 60 s), to keep the whole command within its time budget: the three
  # targets share the 2 cores, about 30 s of one core each.
  run_part fuzz env FUZZ_SECONDS="${FUZZ_SECONDS:-45}" bash "$root/scripts/fuzz.sh"
  run_part arm bash "$root/scripts/arm.sh"
fi

echo "== test.sh: summary"
printf '%s\n' "${summary[@]}"
exit $failed
