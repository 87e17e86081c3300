# The fused forward kernel (src/forward/): one translation unit per element type, each compiled for every
# Highway target (src/simd/dispatch.h), and the block-size rule.
set(flashattn_forward_kernels
  ${CMAKE_CURRENT_LIST_DIR}/forward_f32.cc
  ${CMAKE_CURRENT_LIST_DIR}/forward_f16.cc
  ${CMAKE_CURRENT_LIST_DIR}/forward_bf16.cc
)
target_sources(flashattn PRIVATE ${CMAKE_CURRENT_LIST_DIR}/tiling.cc ${flashattn_forward_kernels})
flashattn_sanitize_kernel_sources(${flashattn_forward_kernels})
