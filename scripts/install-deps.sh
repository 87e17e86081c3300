#!/usr/bin/env bash
# Installs the Debian packages flashattn needs, and only those that are missing: safe to run again and again.
# Works as root, or through sudo otherwise. Nothing comes from anywhere but the Debian archive.
set -euo pipefail

# Build, tests, command line, benchmarks (OpenMP comes with g++).
build_packages=(
  build-essential cmake g++ pkg-config
  libhwy-dev libgtest-dev libbenchmark-dev libcli11-dev libopenblas-dev
)
# Python bindings (issue 6): the module's build, NumPy, pytest, and PyTorch for flashattn.torch and its tests.
python_packages=(python3-numpy python3-pybind11 pybind11-dev python3-pytest python3-torch)

missing=()
for package in "${build_packages[@]}" "${python_packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  [[ $status == "install ok installed" ]] || missing+=("$package")
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#build_packages[@]} + ${#python_packages[@]} packages present"
  exit 0
fi

as_root=()
if ((EUID != 0)); then
  if ! command -v sudo >/dev/null; then
    echo "install-deps: need root or sudo to install: ${missing[*]}" >&2
    exit 1
  fi
  as_root=(sudo)
fi
echo "install-deps: installing ${missing[*]}"
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
