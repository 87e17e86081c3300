#!/usr/bin/env bash
# The Arm part of the test command (docs/arm.md): cross-builds the library and a subset of its tests for
# AArch64 (cmake/aarch64-linux-gnu.cmake, in build-arm/) and runs them under qemu-user on four emulated CPUs:
#   neon     NEON only (SVE off)
#   sve128   SVE, SVE2 and SVE2_128 at 128 bits (Neoverse N2/V2, Graviton 4, Grace)
#   sve256   SVE, SVE2 and SVE_256 at 256 bits (Neoverse V1, Graviton 3)
#   sve512   SVE and SVE2 at 512 bits (A64FX's length)
# The tests run every target the CPU supports (simd::RestrictTargetForTest) but those another CPU runs
# (FLASHATTN_TEST_SKIP_TARGETS, tests/test_targets.h): the SVE CPUs leave NEON and the scalar baseline, whose
# code does not depend on the vector length, to the NEON CPU, and the 256- and 512-bit ones leave SVE2 to
# sve128, as the CPUs of those lengths named above have SVE without SVE2; sve256 runs SVE_256 alone, the
# target such a CPU dispatches to, and leaves the sizeless SVE to the 128- and 512-bit CPUs, the shortest and
# the longest vectors. simd_targets first checks that each
# CPU runs the targets it is meant to, and fails otherwise. One thread: a program that starts a thread hangs
# under Debian 12's qemu-user 7.2, so OMP_THREAD_LIMIT=1 keeps OpenMP from starting any, and the subset leaves
# out the tests that start std::threads (thread safety is ThreadSanitizer's, on x86).
#   bash scripts/arm.sh              # build, then every CPU
#   bash scripts/arm.sh sve256       # build, then the named CPUs only
# Fails, saying what is missing, where the cross toolchain, qemu-user or the arm64 packages are not
# installed (scripts/install-deps.sh installs them).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$root/build-arm
sysroot=/usr/aarch64-linux-gnu

missing=()
command -v aarch64-linux-gnu-g++ >/dev/null || missing+=("aarch64-linux-gnu-g++ (crossbuild-essential-arm64)")
command -v qemu-aarch64 >/dev/null || missing+=("qemu-aarch64 (qemu-user)")
[[ -f /usr/lib/aarch64-linux-gnu/cmake/hwy/hwy-config.cmake ]] || missing+=("Highway for arm64 (libhwy-dev:arm64)")
[[ -f /usr/lib/aarch64-linux-gnu/libgtest.a ]] || missing+=("GoogleTest for arm64 (libgtest-dev:arm64)")
if ((${#missing[@]})); then
  printf 'arm.sh: cannot cross-build and run the Arm tests; missing:\n' >&2
  printf '  %s\n' "${missing[@]}" >&2
  echo "arm.sh: scripts/install-deps.sh installs them (it needs the Debian archive's arm64 packages)" >&2
  exit 1
fi

# The tests that run, each as "executable gtest-filter": every kernel on every target the CPU runs against
# the float64 oracle — forward at odd shapes (GQA, Nq != Nk, d = 40, 111, 256, d != dv, 1025 keys) in all
# three element types with masks and modifiers, forced odd block sizes, rows that see no key; decode over
# every row tile, contiguous and paged, with d = 37, 64, 128; an int8 cache's integer P̃V (its portable path)
# against a float64 model of its rounding, and its integer scores (SVE's SDOT, NEON's widening path) against
# the oracle on the rounded queries; backward; the lightning indexer over every key element type, contiguous and
# paged, against its float64 reference, its ties and NaN ranking; block masks — then non-finite inputs through
# all three, the element conversions and the vector exp's special values, the tests' skipping of targets, and the
# validation tables (no kernel, but every entry point's checks as compiled for AArch64). docs/arm.md gives their times under qemu.
tests=(
  "kernel_fused_test */b2_nq97_nk113_hq4_hkv2_d40_dv40_f32_bshd_causal_cap3_alibi_addmask:*/b2_nq97_nk113_hq4_hkv2_d40_dv40_f16_bshd_causal_cap3_alibi_addmask:*/b1_nq97_nk97_hq2_hkv1_d111_dv40_f32_bshd_full:*/b1_nq1_nk1025_hq1_hkv1_d256_dv256_bf16_bshd_full:FusedKernelTest.EveryForcedBlockSize*:FusedKernelTest.MaskTensor*:FusedKernelTest.RowsWithout*"
  "decode_test Decode.EveryTargetEveryRowTileAgainstTheOracle:Decode.RowsThatSeeNoKey*:Decode.AgreesWithTheReferenceDecode:Shapes/DecodeMatchesForward.OverTheSameCacheContents/2?"
  "decode_quantized_test DecodeQuantized.IntegerPvIsTheRoundingItDescribes:DecodeQuantized.IntegerScoresAreThoseOfTheRoundedQueries"
  "backward_kernel_test FusedBackwardTest.EveryCompiledTargetWithinTolerance"
  "block_mask_test *BlockMaskForwardTest*/1_f32:*BlockMaskForwardTest*/15_f32:*BlockMaskBackwardTest*/1_f32:BlockMaskValidationTest.*"
  "indexer_test Indexer.EveryKeyElementTypeAndLayoutExactly:Indexer.TiesGoToTheLowerPosition:Indexer.NaNRanksLastAndInfFirst"
  "nonfinite_test NonFiniteFused.Float16KAndVInjectionsOnEveryTarget:NonFiniteDecode.*:NonFiniteBackward.Float32*"
  "support_test SupportElements.*"
  "kernel_exp_test FusedExpTest.SpecialValues*"
  "test_targets_test *"
  "validation_test *"
  "validation_matrix_decode_test *"
  "validation_matrix_backward_test *"
  "decode_validation_test *"
  "indexer_validation_test *"
  "backward_validation_test *"
)
executables=(simd_targets)
for entry in "${tests[@]}"; do executables+=("${entry%% *}"); done

echo "== arm: cross-build (build-arm/)"
subset=$(IFS=';'; echo "${executables[*]}")
cmake -S "$root" -B "$build" --toolchain "$root/cmake/aarch64-linux-gnu.cmake" -DCMAKE_BUILD_TYPE=Release \
  -DFLASHATTN_ENABLE_BENCH=OFF -DFLASHATTN_ENABLE_CLI=OFF -DFLASHATTN_BUILD_PYTHON=OFF \
  -DFLASHATTN_ENABLE_MPI=OFF -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON "-DFLASHATTN_TEST_SUBSET=$subset" >/dev/null
cmake --build "$build" -j "$(nproc)" --target flashattn_test_subset

# The qemu -cpu setting of each CPU, and the targets simd_targets must find on it.
declare -A cpu_option=([neon]="max,sve=off" [sve128]="max,sve128=on" [sve256]="max,sve256=on"
                       [sve512]="max,sve512=on")
declare -A cpu_targets=([neon]="NEON" [sve128]="NEON SVE SVE2 SVE2_128" [sve256]="NEON SVE SVE2 SVE_256"
                        [sve512]="NEON SVE SVE2")
# The targets each CPU's tests leave to another CPU.
declare -A cpu_skips=([neon]="" [sve128]="NEON SCALAR" [sve256]="NEON SCALAR SVE2 SVE" [sve512]="NEON SCALAR SVE2")
cpus=("$@")
((${#cpus[@]})) || cpus=(neon sve128 sve256 sve512)
for cpu in "${cpus[@]}"; do
  [[ -n ${cpu_option[$cpu]:-} ]] || { echo "arm.sh: unknown CPU '$cpu' (neon, sve128, sve256, sve512)" >&2; exit 2; }
done

cores=$(nproc)  # before OMP_NUM_THREADS is set: nproc reports that instead of the cores when it is
export OMP_NUM_THREADS=1 OMP_THREAD_LIMIT=1 QEMU_LD_PREFIX=$sysroot
# Runs the whole subset on one emulated CPU; its output goes to build-arm/arm-<cpu>.log.
run_cpu() {
  local cpu=$1 start=$SECONDS target entry name filter output status
  local emulate=(env "FLASHATTN_TEST_SKIP_TARGETS=${cpu_skips[$cpu]}"
                 timeout 600 qemu-aarch64 -cpu "${cpu_option[$cpu]}")
  local requires=()
  for target in ${cpu_targets[$cpu]}; do requires+=(--require "$target"); done
  local listing
  listing=$("${emulate[@]}" "$build/tests/simd_targets" "${requires[@]}") || return 1
  echo "$listing"
  [[ -z ${cpu_skips[$cpu]} ]] || echo "the tests skip ${cpu_skips[$cpu]}, which another CPU runs"
  if [[ $cpu == neon && $listing == *SVE* ]]; then
    echo "arm.sh: the NEON-only CPU runs an SVE target" >&2
    return 1
  fi
  for entry in "${tests[@]}"; do
    name=${entry%% *} filter=${entry#* }
    echo "-- $name"
    status=0
    output=$("${emulate[@]}" "$build/tests/$name" --gtest_brief=1 "--gtest_filter=$filter" 2>&1) || status=$?
    echo "$output"
    if ((status != 0)); then
      ((status == 124)) && echo "arm.sh: $name timed out on $cpu (a hang under qemu-user?)"
      echo "arm.sh: $name FAILED on $cpu (status $status)"
      return 1
    fi
    if [[ $output =~ \[\ \ PASSED\ \ \]\ 0\ tests ]]; then  # a filter that matches nothing runs nothing
      echo "arm.sh: $name ran no test on $cpu (filter $filter)"
      return 1
    fi
  done
  echo "arm.sh: $cpu passed in $((SECONDS - start)) s"
}

# The CPUs run side by side, as many at a time as there are cores; the logs are printed when all are done.
echo "== arm: tests under qemu-aarch64 (${cpus[*]})"
for cpu in "${cpus[@]}"; do
  while (($(jobs -rp | wc -l) >= cores)); do wait -n || true; done
  rm -f "$build/arm-$cpu.status"
  (
    status=0
    run_cpu "$cpu" >"$build/arm-$cpu.log" 2>&1 || status=$?
    echo "$status" >"$build/arm-$cpu.status"
  ) &
done
wait
failed=()
for cpu in "${cpus[@]}"; do
  echo "== arm: $cpu (-cpu ${cpu_option[$cpu]})"
  cat "$build/arm-$cpu.log"
  [[ $(cat "$build/arm-$cpu.status" 2>/dev/null) == 0 ]] || failed+=("$cpu")
done
if ((${#failed[@]})); then
  echo "arm.sh: FAILED on ${failed[*]}" >&2
  exit 1
fi
echo "arm.sh: every CPU passed"
