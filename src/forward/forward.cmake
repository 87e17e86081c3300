# The fused forward kernel (src/forward/): one translation unit per element type, each compiled for every
# Highway target (src/simd/dispatch.h), and the block-size rule.
target_sources(flashattn PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/tiling.cc
  ${CMAKE_CURRENT_LIST_DIR}/forward_f32.cc
  ${CMAKE_CURRENT_LIST_DIR}/forward_f16.cc
  ${CMAKE_CURRENT_LIST_DIR}/forward_bf16.cc
)
flashattn_sanitize_kernel_sources(
  ${CMAKE_CURRENT_LIST_DIR}/forward_f32.cc
  ${CMAKE_CURRENT_LIST_DIR}/forward_f16.cc
  ${CMAKE_CURRENT_LIST_DIR}/forward_bf16.cc
)
