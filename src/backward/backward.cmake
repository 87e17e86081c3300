# The backward pass: the fused kernel (one translation unit per element type, each compiled for every
# Highway target, src/simd/dispatch.h) and the reference backward; the entry points are in src/api.cc.
set(flashattn_backward_kernels
  ${PROJECT_SOURCE_DIR}/src/backward/backward_f32.cc
  ${PROJECT_SOURCE_DIR}/src/backward/backward_f16.cc
  ${PROJECT_SOURCE_DIR}/src/backward/backward_bf16.cc
)
target_sources(flashattn PRIVATE ${flashattn_backward_kernels} ${PROJECT_SOURCE_DIR}/src/reference/backward.cc)
flashattn_sanitize_kernel_sources(${flashattn_backward_kernels})
