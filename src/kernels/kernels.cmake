# The fast kernels, added to the flashattn library target (included by the top-level CMakeLists.txt).
# HWY_COMPILE_ALL_ATTAINABLE compiles every x86 target (scalar, SSSE3, SSE4, AVX2, AVX3) into the library,
# so that the tests can run each one this CPU supports; the best is chosen at run time.
target_sources(flashattn PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/tiling.cc
  ${CMAKE_CURRENT_LIST_DIR}/fused_targets.cc
  ${CMAKE_CURRENT_LIST_DIR}/fused_forward_f32.cc
  ${CMAKE_CURRENT_LIST_DIR}/fused_forward_f16.cc
  ${CMAKE_CURRENT_LIST_DIR}/fused_forward_bf16.cc
)
target_compile_definitions(flashattn PRIVATE HWY_COMPILE_ALL_ATTAINABLE)
