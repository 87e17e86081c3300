#!/usr/bin/env bash
# README command 1: installs what is missing, builds flashattn (Release, in build/) and runs the main job,
# `flashattn demo`. Works from any directory.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

bash "$root/scripts/install-deps.sh"
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$root/build" --target flashattn_cli -j "$(nproc)"
"$root/build/cli/flashattn" demo "$@"
