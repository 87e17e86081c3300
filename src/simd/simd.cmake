# The SIMD building blocks shared by every kernel (src/simd/): most are per-target -inl.h headers compiled
# into the kernels' own translation units; targets.cc holds the test hooks. HWY_COMPILE_ALL_ATTAINABLE
# compiles every x86 target (scalar, SSSE3, SSE4, AVX2, AVX3) into the library, so that the tests can run
# each one this CPU supports; the best is chosen at run time. (On Arm: NEON and scalar, below.)
target_sources(flashattn PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/targets.cc
)
target_compile_definitions(flashattn PRIVATE HWY_COMPILE_ALL_ATTAINABLE)
# On Arm the library is compiled for NEON (every AArch64 CPU) and the scalar baseline. Highway's SVE targets
# have sizeless vector types, which cannot be array elements; the register tiles hold no arrays of vectors
# (RegisterTile), but the SVE targets stay off until they are built and tested on SVE hardware.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64|ARM64)$")
  target_compile_definitions(flashattn PRIVATE "HWY_DISABLED_TARGETS=(HWY_SVE|HWY_SVE2|HWY_SVE_256|HWY_SVE2_128)")
endif()
