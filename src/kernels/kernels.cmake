# The fast kernels, added to the flashattn library target (included by the top-level CMakeLists.txt),
# compiled for every Highway target (cmake/simd_targets.cmake); the best is chosen at run time.
target_sources(flashattn PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/tiling.cc
  ${CMAKE_CURRENT_LIST_DIR}/fused_targets.cc
  ${CMAKE_CURRENT_LIST_DIR}/fused_forward_f32.cc
  ${CMAKE_CURRENT_LIST_DIR}/fused_forward_f16.cc
  ${CMAKE_CURRENT_LIST_DIR}/fused_forward_bf16.cc
)
flashattn_compile_for_every_simd_target(flashattn)
