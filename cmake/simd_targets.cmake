# flashattn_compile_for_every_simd_target(<target>): the Highway targets <target>'s foreach_target
# translation units are compiled for. Every x86 target Highway can build (scalar, SSSE3, SSE4, AVX2, AVX3) is
# compiled in, so that the tests can run each one this CPU supports; the best is chosen at run time. On Arm:
# NEON (every AArch64 CPU) and the scalar baseline. The register tiles hold no arrays of sizeless SVE vectors
# (RegisterTile), but the SVE targets stay off until they are built and tested on SVE hardware.
# The library's kernels and the measurement tools that dispatch like them (tools/) share this one setting.
function(flashattn_compile_for_every_simd_target target)
  target_compile_definitions(${target} PRIVATE HWY_COMPILE_ALL_ATTAINABLE)
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64|ARM64)$")
    target_compile_definitions(${target} PRIVATE "HWY_DISABLED_TARGETS=(HWY_SVE|HWY_SVE2|HWY_SVE_256|HWY_SVE2_128)")
  endif()
endfunction()
