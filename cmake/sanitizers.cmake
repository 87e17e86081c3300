# Sanitizer and fuzzing builds (docs/robustness.md). Included by the top-level CMakeLists.txt before any
# target is created, so the flags reach the library, the command line and the tests alike.
#
#   FLASHATTN_SANITIZE  ""                  plain build (default)
#                       "address;undefined" AddressSanitizer + UndefinedBehaviorSanitizer, every report fatal
#                       "thread"            ThreadSanitizer (use clang: libomp + Archer make TSan understand
#                                           OpenMP; GCC's libgomp is not instrumented)
#   FLASHATTN_FUZZ      ON: everything gets libFuzzer's coverage instrumentation and fuzz/ builds libFuzzer
#                       executables (clang only); OFF: fuzz/ targets are built with a replay main and their
#                       corpora run as a regression test.
set(FLASHATTN_SANITIZE "" CACHE STRING "Sanitizers for every target: '', 'address;undefined' or 'thread'")
option(FLASHATTN_FUZZ "Build the libFuzzer targets in fuzz/ (clang)" OFF)

if(FLASHATTN_SANITIZE)
  set(flashattn_known_sanitizers address undefined thread)
  foreach(sanitizer IN LISTS FLASHATTN_SANITIZE)
    if(NOT sanitizer IN_LIST flashattn_known_sanitizers)
      message(FATAL_ERROR "FLASHATTN_SANITIZE: unknown sanitizer '${sanitizer}' (address, undefined, thread)")
    endif()
  endforeach()
  if("thread" IN_LIST FLASHATTN_SANITIZE AND "address" IN_LIST FLASHATTN_SANITIZE)
    message(FATAL_ERROR "FLASHATTN_SANITIZE: 'thread' cannot be combined with 'address'")
  endif()
  list(JOIN FLASHATTN_SANITIZE "," flashattn_sanitizers)
  # Every report is an error: no recovery, so the process stops at the first one with a non-zero status.
  add_compile_options(-fsanitize=${flashattn_sanitizers} -fno-sanitize-recover=all -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${flashattn_sanitizers})
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    # clang may lower a float16 conversion of Highway's x86 targets to a call (__gnu_h2f_ieee) that libgcc
    # lacks: compiler-rt's builtins archive provides it, linked after every target's own objects.
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} --rtlib=compiler-rt --print-libgcc-file-name
                    OUTPUT_VARIABLE flashattn_clang_builtins OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT flashattn_clang_builtins MATCHES "clang_rt")
      message(FATAL_ERROR "clang's compiler-rt builtins are missing (libclang-rt-dev): run scripts/install-deps.sh")
    endif()
    link_libraries("${flashattn_clang_builtins}")
  endif()
  if("address" IN_LIST FLASHATTN_SANITIZE)
    # libstdc++'s own bounds checks (operator[], front(), back()) on top of ASan's redzones.
    add_compile_definitions(_GLIBCXX_ASSERTIONS)
  endif()
endif()

# flashattn_sanitize_kernel_sources(<source>...): SIMD kernel translation units (each compiled for every
# Highway target) that leave UndefinedBehaviorSanitizer's pointer-overflow check out. In their unrolled
# register tiles nearly every line sums a pointer, and the check made clang take 12 times as long over them
# (forward_f16.cc: 173 s instead of 14 on one core; the test command's asan part, 734 s instead of 552). The
# forward and backward kernels take it: their addresses come from the validated sizes and strides in regular
# loops, their memory accesses stay under AddressSanitizer and their arithmetic under the rest of UBSan.
# Decode's float32 unit keeps the check: it found the prefetch addresses decode once built from offsets it had
# not set, which AddressSanitizer cannot see (docs/robustness.md). Its other units, the float32 unit's code for
# other element types, leave it out (decode_f16.cc: 146 s with it, 22 s without on a Zen 3 core), the int8
# one's integer paths included (decode_i8.cc: 220 s with it, 37 s without; 212 s of a 313 s library build).
function(flashattn_sanitize_kernel_sources)
  if("undefined" IN_LIST FLASHATTN_SANITIZE)
    set_source_files_properties(${ARGN} PROPERTIES COMPILE_OPTIONS -fno-sanitize=pointer-overflow)
  endif()
endfunction()

if(FLASHATTN_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "FLASHATTN_FUZZ needs clang (libFuzzer): configure with CMAKE_CXX_COMPILER=clang++")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
