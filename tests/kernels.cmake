# Tests of the fused forward kernel (src/forward/) and the SIMD layer (src/simd/): accuracy on every compiled
# SIMD target, threads, the vector exp.
flashattn_add_test(kernel_fused_test kernel_fused_test.cc)
flashattn_add_test(kernel_exp_test kernel_exp_test.cc)
flashattn_add_test(kernel_threads_test kernel_threads_test.cc)
# The working memory calling threads keep between calls: its limit and release (include/flashattn/working_memory.h).
flashattn_add_test(working_memory_test working_memory_test.cc)
# The tests' choice of targets: every one this CPU runs, less those FLASHATTN_TEST_SKIP_TARGETS names.
flashattn_add_test(test_targets_test test_targets_test.cc)
# The SIMD targets this CPU runs and the dispatched one (scripts/arm.sh checks each emulated Arm CPU's).
add_executable(simd_targets simd_targets.cc)
target_link_libraries(simd_targets PRIVATE flashattn::internal)
target_include_directories(simd_targets PRIVATE ${PROJECT_SOURCE_DIR}/src)
add_test(NAME simd_targets COMMAND simd_targets)
