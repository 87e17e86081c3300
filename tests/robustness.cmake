# Robustness (docs/robustness.md).
#
# 1. The fuzz targets (fuzz/): in every build a CTest test replays each one's seed corpus and crash
#    reproducers; with FLASHATTN_FUZZ they are libFuzzer programs for scripts/fuzz.sh.
include(${PROJECT_SOURCE_DIR}/fuzz/fuzz.cmake)

# 2. In a sanitizer build (FLASHATTN_SANITIZE, cmake/sanitizers.cmake), a subset of the tests labelled
#    `sanitize`, run by `ctest --preset asan-ubsan` / `--preset tsan` (scripts/sanitize.sh), built by the
#    target flashattn_sanitize_tests. Every report stops the test with a non-zero status.
if(NOT FLASHATTN_SANITIZE)
  return()
endif()

add_custom_target(flashattn_sanitize_tests)
if("thread" IN_LIST FLASHATTN_SANITIZE)
  # libomp's Archer tool tells TSan about OpenMP's barriers, tasks and reductions (libomp itself is not
  # instrumented); without it every parallel region's hand-off would be reported.
  get_filename_component(flashattn_llvm_lib ${CMAKE_CXX_COMPILER} REALPATH)
  get_filename_component(flashattn_llvm_lib ${flashattn_llvm_lib} DIRECTORY)
  find_library(FLASHATTN_ARCHER archer HINTS ${flashattn_llvm_lib}/../lib NO_DEFAULT_PATH)
  find_library(FLASHATTN_ARCHER archer)
  if(NOT FLASHATTN_ARCHER OR NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "FLASHATTN_SANITIZE=thread needs clang with libomp's Archer tool (libarcher.so, "
                        "Debian package libomp-dev); found compiler ${CMAKE_CXX_COMPILER_ID}, "
                        "archer '${FLASHATTN_ARCHER}'")
  endif()
  set(flashattn_sanitize_env
      "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:history_size=4:ignore_noninstrumented_modules=1"
      "OMP_TOOL_LIBRARIES=${FLASHATTN_ARCHER}" "ARCHER_OPTIONS=verbose=0")
  set(flashattn_sanitize_label tsan)
else()
  set(flashattn_asan_options detect_leaks=1 abort_on_error=1 detect_stack_use_after_return=1
                             check_initialization_order=1 strict_init_order=1)
  list(JOIN flashattn_asan_options ":" flashattn_asan_options)
  set(flashattn_sanitize_env
      "ASAN_OPTIONS=${flashattn_asan_options}"
      "UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1"
      # libomp 14 leaks a few team structures when a team grows and shrinks again (a 10-line OpenMP program
      # shows it; docs/robustness.md): without hot teams it does not, and LeakSanitizer stays on for ours.
      "KMP_HOT_TEAMS_MAX_LEVEL=0")
  set(flashattn_sanitize_label asan)
endif()

# flashattn_sanitized_test(<test executable> <gtest pattern>...): the executable's cases that match any of
# the patterns.
function(flashattn_sanitized_test name)
  if(NOT TARGET ${name})
    message(FATAL_ERROR "flashattn_sanitized_test: no test executable ${name}")
  endif()
  list(JOIN ARGN ":" filter)
  add_test(NAME sanitize.${name} COMMAND ${name} --gtest_brief=1 --gtest_filter=${filter})
  set_tests_properties(sanitize.${name} PROPERTIES LABELS "sanitize;${flashattn_sanitize_label}"
                                                   ENVIRONMENT "${flashattn_sanitize_env}" TIMEOUT 900)
  add_dependencies(flashattn_sanitize_tests ${name})
endfunction()

if(flashattn_sanitize_label STREQUAL "asan")
  # Every entry point with the whole validation matrix, non-finite inputs and concurrent callers; every
  # kernel on every compiled SIMD target, the reference layer, the cache detection, the tools' conversions,
  # the .npy reader and the command line. The big parameterized matrices are cut to a few shapes each (odd
  # sizes, GQA, d != dv, one query row).
  flashattn_sanitized_test(validation_test "*")
  flashattn_sanitized_test(validation_matrix_decode_test "*")
  flashattn_sanitized_test(validation_matrix_merge_varlen_test "*")
  flashattn_sanitized_test(validation_matrix_backward_test "*")
  flashattn_sanitized_test(nonfinite_test "*")
  flashattn_sanitized_test(concurrency_test "*")
  flashattn_sanitized_test(decode_validation_test "*")
  flashattn_sanitized_test(backward_validation_test "*")
  # d != dv with no modifier and with all of them (the other shapes take each modifier on its own): every
  # combination of that shape took 51 of this test's 57 s.
  flashattn_sanitized_test(reference_attention_test
    "ReferenceAttentionTest.*" "*/*b2_nq97_nk113_hq4_hkv2_d40_dv40*"
    "*/*b2_nq113_nk97_hq3_hkv3_d40_dv256_f32_bhsd_full" "*/*b2_nq113_nk97_hq3_hkv3_d40_dv256_*_cap3_alibi_addmask"
    "*/*b1_nq97_nk97_hq2_hkv1_d111_dv40*" "*/*b1_nq1_nk1025_hq1_hkv1_d59_*")
  flashattn_sanitized_test(softmax_test "*")
  # The special values and the odd-length tail; the dense sweeps over the range (21 s here) check accuracy.
  flashattn_sanitized_test(kernel_exp_test "FusedExpTest.SpecialValues*")
  flashattn_sanitized_test(kernel_fused_test
    "*/*b2_nq97_nk113_hq4_hkv2_d40_dv40*" "*/*b1_nq77_nk40_hq2_hkv2_d512_dv7*"
    "*/*b1_nq1_nk1025_hq1_hkv1_d59_*"
    "FusedKernelTest.EveryForcedBlockSize*" "FusedKernelTest.MaskTensor*" "FusedKernelTest.RowsWithout*"
    "FusedKernelTest.Empty*" "FusedKernelTest.Dropout*")
  flashattn_sanitized_test(kernel_threads_test "*")
  flashattn_sanitized_test(working_memory_test "*")
  flashattn_sanitized_test(merge_test "*")
  flashattn_sanitized_test(decode_test "*")
  # Not the comparison of integer P̃V across targets, nor the statistics of the error over large caches
  # (DecodeQuantized.Nmse*, 15 s here), which run the paths the other tests run.
  flashattn_sanitized_test(decode_quantized_test
    "*-DecodeQuantized.IntegerPvAgreesOnEveryTarget:DecodeQuantized.Nmse*")
  flashattn_sanitized_test(varlen_forward_test "*")
  flashattn_sanitized_test(indexer_test "*")
  flashattn_sanitized_test(indexer_validation_test "*")
  # Selected keys: forward, decode over every cache type, the refused lists (14 s here).
  flashattn_sanitized_test(selected_keys_test "*")
  flashattn_sanitized_test(backward_kernel_test
    "FusedBackwardTest.*" "*FusedBackwardHalfTest*/0" "*FusedBackwardMatrixTest*/0"
    "*FusedBackwardMatrixTest*/7")
  flashattn_sanitized_test(backward_reference_test "StandardBackwardTest.*" "BackwardEdgeTest.*")
  flashattn_sanitized_test(backward_dropout_test "PhiloxTest.*" "DropoutForwardTest.*")
  flashattn_sanitized_test(backward_varlen_test "*")
  # Block masks: every case but the 1025-row ones (forward case 14, backward case 7, the brute-force
  # classification at 1025), which run the same paths longer.
  flashattn_sanitized_test(block_mask_test
    "*-*BlockMaskForwardTest*/14_f32:*BlockMaskBackwardTest*/7_f32:CreateBlockMask.ClassifiesAsBruteForce")
  flashattn_sanitized_test(cpu_caches_test "*")
  flashattn_sanitized_test(support_test "*")
  # The C API: the mapping of every C struct and its stride helpers, and c_api_test.c (every entry point from
  # C) compiled by the C compiler with the same instrumentation and linked to the instrumented library, so that
  # a call or stride helper that writes past a C caller's buffer is reported.
  flashattn_sanitized_test(c_api_fields_test "*")
  enable_language(C)
  add_executable(c_api_c_test ${CMAKE_CURRENT_SOURCE_DIR}/c_api/c_api_test.c)
  target_link_libraries(c_api_c_test PRIVATE flashattn m)
  set_target_properties(c_api_c_test PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
  add_test(NAME sanitize.c_api_test COMMAND c_api_c_test ${PROJECT_VERSION})
  set_tests_properties(sanitize.c_api_test PROPERTIES LABELS "sanitize;${flashattn_sanitize_label}"
                                                      ENVIRONMENT "${flashattn_sanitize_env}" TIMEOUT 900)
  add_dependencies(flashattn_sanitize_tests c_api_c_test)
  if(FLASHATTN_ENABLE_CLI)
    flashattn_sanitized_test(npy_test "*")
    flashattn_sanitized_test(cli_test "*")
  endif()
else()
  # The threaded paths: the fused forward on 1, 2 and 4 threads and from concurrent callers, decode's
  # splits merged across threads, the indexer's chunks merged across threads, the backward pass's threads,
  # varlen, and the concurrency suite.
  flashattn_sanitized_test(kernel_threads_test "*")
  flashattn_sanitized_test(decode_test
    "Decode.AnySplitCount*" "Decode.PagedEquals*" "Decode.AgreesWithTheReference*")
  flashattn_sanitized_test(varlen_forward_test "*")
  flashattn_sanitized_test(indexer_test "Indexer.TheSameResultOnAnyThreadCount")
  flashattn_sanitized_test(backward_kernel_test
    "FusedBackwardTest.AnyThreadCount*" "FusedBackwardTest.TwentyRepeated*")
  # The backward pass's table of block classes, filled by the team and read by every thread (GQA cases).
  flashattn_sanitized_test(block_mask_test "*BlockMaskForwardTest*/15_f32" "*BlockMaskBackwardTest*/8_f32")
  flashattn_sanitized_test(concurrency_test "*")
  flashattn_sanitized_test(working_memory_test "*")
endif()
