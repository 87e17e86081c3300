#!/usr/bin/env bash
# README command 2: installs what is missing, builds flashattn and every test (Release, in build/) and runs
# them all. Exits non-zero if anything fails or a test exceeds its time limit. Works from any directory.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

bash "$root/scripts/install-deps.sh"
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$root/build" -j "$(nproc)"
# Per-test limit; the whole run has to stay well under CI's 30 minutes on 2 cores.
ctest --test-dir "$root/build" --output-on-failure -j2 --timeout 600
