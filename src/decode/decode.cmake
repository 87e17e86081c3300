# Flash-Decoding: merge_attention_states and decode over a KV cache. The kernel has one translation unit
# per element type, each compiled for every Highway target (src/simd/dispatch.h).
target_sources(flashattn PRIVATE
  ${PROJECT_SOURCE_DIR}/src/decode/decode.cc
  ${PROJECT_SOURCE_DIR}/src/decode/split_kv.cc
  ${PROJECT_SOURCE_DIR}/src/decode/decode_f32.cc
  ${PROJECT_SOURCE_DIR}/src/decode/decode_f16.cc
  ${PROJECT_SOURCE_DIR}/src/decode/decode_bf16.cc
  ${PROJECT_SOURCE_DIR}/src/decode/decode_i8.cc
  ${PROJECT_SOURCE_DIR}/src/decode/decode_fp8.cc
  ${PROJECT_SOURCE_DIR}/src/decode/quantize.cc
  ${PROJECT_SOURCE_DIR}/src/decode/merge.cc
  ${PROJECT_SOURCE_DIR}/src/reference/decode.cc
  ${PROJECT_SOURCE_DIR}/src/reference/merge.cc
)
# Under UBSan only the float32 unit keeps the pointer-overflow check: the others compile its code for another
# element type, and the int8 unit's integer paths read the same tables of row addresses as its float tiles
# (cmake/sanitizers.cmake).
flashattn_sanitize_kernel_sources(${PROJECT_SOURCE_DIR}/src/decode/decode_f16.cc
                                  ${PROJECT_SOURCE_DIR}/src/decode/decode_bf16.cc
                                  ${PROJECT_SOURCE_DIR}/src/decode/decode_i8.cc
                                  ${PROJECT_SOURCE_DIR}/src/decode/decode_fp8.cc)
