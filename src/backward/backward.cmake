# The backward pass (issue 5): public entry point, the fast kernel (one translation unit per element type,
# compiled for every Highway target), the reference backward and the dropout generator. Added to the
# flashattn library target (included by the top-level CMakeLists.txt).
target_sources(flashattn PRIVATE
  ${PROJECT_SOURCE_DIR}/src/backward/varlen.cc
  ${PROJECT_SOURCE_DIR}/src/backward/backward_f32.cc
  ${PROJECT_SOURCE_DIR}/src/backward/backward_f16.cc
  ${PROJECT_SOURCE_DIR}/src/backward/backward_bf16.cc
  ${PROJECT_SOURCE_DIR}/src/reference/backward.cc
  ${PROJECT_SOURCE_DIR}/src/common/dropout.cc
)
