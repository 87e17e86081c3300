# The lightning indexer: one translation unit per cache element type, each compiled for every Highway target
# (src/simd/dispatch.h).
target_sources(flashattn PRIVATE
  ${PROJECT_SOURCE_DIR}/src/indexer/indexer_f32.cc
  ${PROJECT_SOURCE_DIR}/src/indexer/indexer_f16.cc
  ${PROJECT_SOURCE_DIR}/src/indexer/indexer_bf16.cc
  ${PROJECT_SOURCE_DIR}/src/indexer/indexer_i8.cc
  ${PROJECT_SOURCE_DIR}/src/indexer/indexer_fp8_e4m3.cc
  ${PROJECT_SOURCE_DIR}/src/indexer/indexer_fp8_e5m2.cc
  ${PROJECT_SOURCE_DIR}/src/reference/indexer.cc
)
flashattn_sanitize_kernel_sources(${PROJECT_SOURCE_DIR}/src/indexer/indexer_f16.cc
                                  ${PROJECT_SOURCE_DIR}/src/indexer/indexer_bf16.cc
                                  ${PROJECT_SOURCE_DIR}/src/indexer/indexer_i8.cc
                                  ${PROJECT_SOURCE_DIR}/src/indexer/indexer_fp8_e4m3.cc
                                  ${PROJECT_SOURCE_DIR}/src/indexer/indexer_fp8_e5m2.cc)
