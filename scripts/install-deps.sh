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
# Context parallelism (docs/distributed.md): Open MPI's headers and libraries for flashattn::mpi, mpirun for
# its tests and benchmark, and mpi4py for flashattn.distributed.
mpi_packages=(libopenmpi-dev openmpi-bin python3-mpi4py)
# The Python package's PEP 517 build (pyproject.toml, setup.py) in a venv: setuptools and wheel, pip and venv,
# and `python3 -m build` for wheels.
packaging_packages=(python3-setuptools python3-wheel python3-pip python3-venv python3-build)
# Sanitizer builds and fuzzers (issue 8, docs/robustness.md): clang; compiler-rt's ASan, UBSan, TSan and
# libFuzzer runtimes (libclang-rt-dev; clang only recommends it); LLVM's OpenMP with its Archer tool for TSan
# (libomp-dev); llvm-symbolizer for readable reports (llvm). Debian's default-version packages, so that all
# four match the clang they come with.
sanitizer_packages=(clang libclang-rt-dev libomp-dev llvm)

packages=("${build_packages[@]}" "${python_packages[@]}" "${packaging_packages[@]}" "${mpi_packages[@]}"
          "${sanitizer_packages[@]}")
missing=()
for package in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  [[ $status == "install ok installed" ]] || missing+=("$package")
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
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
apt_get=("${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q)
"${apt_get[@]}" update
"${apt_get[@]}" install -y --no-install-recommends "${missing[@]}"
