# flashattn_compile_for_every_simd_target(<target>): the Highway targets <target>'s foreach_target
# translation units are compiled for. Every target Highway can build is compiled in, so that the tests can
# run each one this CPU supports; the best is chosen at run time. On x86: scalar, SSSE3, SSE4, AVX2, AVX3.
# On AArch64: the scalar baseline, NEON, and SVE, SVE2, SVE_256 and SVE2_128 (Arm's sizeless vectors: the
# register tiles hold no arrays of them, docs/arm.md), run under emulation by scripts/arm.sh.
# The library's kernels and the measurement tools that dispatch like them (tools/) share this one setting.
#
# Sanitizer builds compile two x86 targets: AVX2 (the hardware target every CPU this project has met runs,
# Zen 3 included) and the scalar baseline's emulated 128-bit vectors. Compiling every kernel under
# AddressSanitizer for all five took most of the test command's time; the release build still compiles and
# tests all of them (docs/robustness.md).
function(flashattn_compile_for_every_simd_target target)
  target_compile_definitions(${target} PRIVATE HWY_COMPILE_ALL_ATTAINABLE)
  if(FLASHATTN_SANITIZE)
    target_compile_definitions(${target} PRIVATE "HWY_DISABLED_TARGETS=(HWY_SSSE3|HWY_SSE4|HWY_AVX3|HWY_AVX3_DL)")
  endif()
endfunction()
