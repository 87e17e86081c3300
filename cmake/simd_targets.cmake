# flashattn_compile_for_every_simd_target(<target>): the Highway targets <target>'s foreach_target
# translation units are compiled for. Every target Highway can build is compiled in but SSSE3, so that the
# tests can run each one this CPU supports; the best is chosen at run time. On x86: scalar, SSE4, AVX2, AVX3.
# SSSE3 is left out: the only x86-64 CPUs that have it without SSE4.1 are the first Core 2 and Atom cores
# (2006-2008), which run the scalar baseline instead. Its kernels were about 15% of the release build's kernel
# compile and a quarter of each test's runs over the targets on an AVX2 CPU (docs/robustness.md). The x86-64
# microarchitecture levels likewise go from the baseline (v1) straight to SSE4.2 (v2), as do llama.cpp's CPU
# builds.
# On AArch64: the scalar baseline, NEON, and SVE, SVE2, SVE_256 and SVE2_128 (Arm's sizeless vectors: the
# register tiles hold no arrays of them, docs/arm.md), run under emulation by scripts/arm.sh.
# The library's kernels and the measurement tools that dispatch like them (tools/) share this one setting.
#
# FLASHATTN_SIMD_TARGETS=reduced compiles two x86 targets only: AVX2 (the hardware target every CPU this
# project has met runs, Zen 3 included) and the scalar baseline. The release build still compiles and tests
# all of them (docs/robustness.md). On Arm the setting changes nothing.
#
# FLASHATTN_SIMD_TARGETS=native compiles one target, the best the building machine's CPU runs (-march=native:
# AVX2 on a Zen 3, AVX-512 on a Zen 4), the one the dispatch picks there, for a build that runs only where it
# was built. The sanitizer builds take it by default: AddressSanitizer and UndefinedBehaviorSanitizer then
# check the vector code this CPU runs, with its partial vectors at the tails, and the fuzzers drive it; the
# other targets' code runs in the release build's tests without them. With two (AVX2 and the scalar
# baseline) the test command's asan part had taken 555 s on the Zen 3; with AVX2 alone, 448 s
# (docs/robustness.md).
#
# FLASHATTN_SIMD_TARGETS=baseline compiles one target, the one the compiler's flags select (x86-64 without
# -m flags: the scalar baseline; AArch64: NEON): for the shared library's consumer test and the pip test,
# which check the install, the exported symbols and a small call, not the kernels, and for the
# ThreadSanitizer build (CMakePresets.json): the threads, their loops and the scratch each one writes are the
# same code on every target, so one target's kernels serve, and compiling two took that build twice as long.
if(FLASHATTN_SANITIZE)
  set(flashattn_default_simd_targets native)
else()
  set(flashattn_default_simd_targets all)
endif()
set(FLASHATTN_SIMD_TARGETS ${flashattn_default_simd_targets} CACHE STRING
    "Highway targets to compile: 'all', 'reduced' (x86: AVX2 and the scalar baseline), 'native' (this CPU's \
best) or 'baseline' (the compiler flags' own)")
set_property(CACHE FLASHATTN_SIMD_TARGETS PROPERTY STRINGS all reduced native baseline)
if(NOT FLASHATTN_SIMD_TARGETS MATCHES "^(all|reduced|native|baseline)$")
  message(FATAL_ERROR "FLASHATTN_SIMD_TARGETS: '${FLASHATTN_SIMD_TARGETS}' is none of 'all', 'reduced', "
                      "'native', 'baseline'")
endif()

function(flashattn_compile_for_every_simd_target target)
  if(FLASHATTN_SIMD_TARGETS MATCHES "^(baseline|native)$")
    target_compile_definitions(${target} PRIVATE HWY_COMPILE_ONLY_STATIC)
    if(FLASHATTN_SIMD_TARGETS STREQUAL "native")
      target_compile_options(${target} PRIVATE -march=native)
    endif()
    return()
  endif()
  target_compile_definitions(${target} PRIVATE HWY_COMPILE_ALL_ATTAINABLE)
  if(FLASHATTN_SIMD_TARGETS STREQUAL "reduced")
    target_compile_definitions(${target} PRIVATE "HWY_DISABLED_TARGETS=(HWY_SSSE3|HWY_SSE4|HWY_AVX3|HWY_AVX3_DL)")
  else()
    target_compile_definitions(${target} PRIVATE "HWY_DISABLED_TARGETS=HWY_SSSE3")
  endif()
endfunction()
