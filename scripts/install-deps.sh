#!/usr/bin/env bash
# Installs the Debian packages flashattn needs, and only those that are missing: safe to run again and again.
# Works as root, or through sudo otherwise. Nothing comes from anywhere but the Debian archive.
set -euo pipefail

# Build, tests, command line, benchmarks (OpenMP comes with g++); ninja for the test that configures the project
# with a multi-configuration generator (tests/install/configure_multi_config.cmake).
build_packages=(
  build-essential cmake g++ pkg-config ninja-build
  libhwy-dev libgtest-dev libbenchmark-dev libcli11-dev libopenblas-dev
)
# Python bindings (docs/python.md): the module's build, NumPy, pytest, and PyTorch for flashattn.torch and its tests.
python_packages=(python3-numpy python3-pybind11 pybind11-dev python3-pytest python3-torch)
# Context parallelism (docs/distributed.md): Open MPI's headers and libraries for flashattn::mpi, mpirun for
# its tests and benchmark, and mpi4py for flashattn.distributed.
mpi_packages=(libopenmpi-dev openmpi-bin python3-mpi4py)
# The Python package's PEP 517 build (pyproject.toml, setup.py) in a venv: setuptools and wheel, pip and venv,
# and `python3 -m build` for wheels.
packaging_packages=(python3-setuptools python3-wheel python3-pip python3-venv python3-build)
# docs/performance.md's roofline plot (scripts/perf_plot.py).
docs_packages=(python3-matplotlib)
# Sanitizer builds and fuzzers (docs/robustness.md): clang; compiler-rt's ASan, UBSan, TSan and
# libFuzzer runtimes (libclang-rt-dev; clang only recommends it); LLVM's OpenMP with its Archer tool for TSan
# (libomp-dev); llvm-symbolizer for readable reports (llvm). Debian's default-version packages, so that all
# four match the clang they come with.
sanitizer_packages=(clang libclang-rt-dev libomp-dev llvm)

# The Arm part of the tests (docs/arm.md, scripts/arm.sh): the AArch64 cross compiler (with its libgomp),
# qemu-user to run the programs it builds, and the arm64 builds of Highway and GoogleTest through Debian's
# multiarch (the arm64 architecture is added to dpkg first). Installed after the others and allowed to fail:
# where they cannot be installed, scripts/arm.sh fails saying which is missing, and the other parts still run.
arm_packages=(crossbuild-essential-arm64 qemu-user libhwy-dev:arm64 libgtest-dev:arm64)

packages=("${build_packages[@]}" "${python_packages[@]}" "${packaging_packages[@]}" "${mpi_packages[@]}"
          "${docs_packages[@]}" "${sanitizer_packages[@]}")

# Sets `missing` to those of the given packages that are not installed: a name without an architecture
# (`libhwy-dev`) for this machine's own or for all, one with it (`libhwy-dev:arm64`) for that one. With
# arm64 added, dpkg-query reports a package installed for both architectures once for each.
native_architecture=$(dpkg --print-architecture)
find_missing() {
  missing=()
  local package wanted architecture status found
  for package in "$@"; do
    wanted=" $native_architecture all "
    [[ $package == *:* ]] && wanted=" ${package#*:} "
    found=0
    while read -r architecture status; do
      [[ $status == "install ok installed" && $wanted == *" $architecture "* ]] && found=1
    done < <(dpkg-query -W -f='${Architecture} ${Status}\n' "$package" 2>/dev/null || true)
    ((found)) || missing+=("$package")
  done
}

as_root=()
apt_get=()
# Sets apt_get to apt-get run as root (directly, or through sudo); fails when neither is possible.
become_root() {
  if ((EUID != 0)); then
    if ! command -v sudo >/dev/null; then
      echo "install-deps: need root or sudo to install: ${missing[*]}" >&2
      return 1
    fi
    as_root=(sudo)
  fi
  apt_get=("${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q)
}

find_missing "${packages[@]}"
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
else
  become_root
  echo "install-deps: installing ${missing[*]}"
  "${apt_get[@]}" update
  "${apt_get[@]}" install -y --no-install-recommends "${missing[@]}"
fi

find_missing "${arm_packages[@]}"
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#arm_packages[@]} Arm packages present"
  exit 0
fi
install_arm_packages() {
  become_root &&
    echo "install-deps: installing the Arm packages ${missing[*]}" &&
    { dpkg --print-foreign-architectures | grep -qx arm64 || "${as_root[@]}" dpkg --add-architecture arm64; } &&
    "${apt_get[@]}" update &&
    "${apt_get[@]}" install -y --no-install-recommends "${missing[@]}"
}
if ! install_arm_packages; then
  echo "install-deps: could not install the Arm packages ${missing[*]}: the arm part of scripts/test.sh" \
    "will fail" >&2
fi
