# Cross build for AArch64 Linux with Debian's cross toolchain (crossbuild-essential-arm64) against the arm64
# packages of Highway and GoogleTest installed through multiarch (scripts/install-deps.sh):
#   cmake -S . -B build-arm --toolchain cmake/aarch64-linux-gnu.cmake
# The programs it builds run under qemu-user (scripts/arm.sh; docs/arm.md).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Packages' libraries and CMake configurations are found in the multiarch directory /usr/lib/aarch64-linux-gnu
# (headers are shared with the host's packages in /usr/include), never in the host's x86_64 one.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# try_run and CTest run the AArch64 programs through qemu-user.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu)
