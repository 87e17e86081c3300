#!/usr/bin/env bash
# Builds the sanitizer presets with clang (CMakePresets.json; the library and only the tests they run) and
# runs their test subsets (tests/robustness.cmake): asan-ubsan in build-asan/, tsan in build-tsan/. Every
# sanitizer report fails its test, and any failure makes this script exit non-zero.
#   bash scripts/sanitize.sh                # both (scripts/test.sh runs them one after the other)
#   bash scripts/sanitize.sh tsan           # one of them
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"  # ctest and cmake find CMakePresets.json here

presets=("$@")
((${#presets[@]})) || presets=(asan-ubsan tsan)
if command -v llvm-symbolizer >/dev/null; then
  export ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-$(command -v llvm-symbolizer)}
fi
for preset in "${presets[@]}"; do
  echo "== sanitize: $preset"
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$(nproc)"
  ctest --preset "$preset" -j "$(nproc)"
done
