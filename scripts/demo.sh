#!/usr/bin/env bash
# README command 1: installs what is missing, builds flashattn (Release, in build/), installs the Python
# package and runs the main job, `flashattn demo`. Works from any directory.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

bash "$root/scripts/install-deps.sh"
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$root/build" --target flashattn_cli flashattn_python -j "$(nproc)"
# The Python package into /usr/bin/python3's site-packages, so that `import flashattn` works (README, Python).
as_root=()
((EUID == 0)) || ! command -v sudo >/dev/null || as_root=(sudo)
"${as_root[@]}" cmake --install "$root/build" --component python
"$root/build/cli/flashattn" demo "$@"
