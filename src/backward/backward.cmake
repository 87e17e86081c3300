# The backward pass: the fused kernel (one translation unit per element type, each compiled for every Highway
# target, src/simd/dispatch.h) and backward_varlen.
target_sources(flashattn PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/backward_f32.cc
  ${CMAKE_CURRENT_LIST_DIR}/backward_f16.cc
  ${CMAKE_CURRENT_LIST_DIR}/backward_bf16.cc
  ${CMAKE_CURRENT_LIST_DIR}/varlen.cc
)
