# Flash-Decoding: merge_attention_states and decode over a KV cache. The kernel has one translation unit
# per element type, each compiled for every Highway target (src/simd/dispatch.h).
# The int8 unit first and the float32 one next: the longest to compile (the integer paths of every target; the
# float32 unit under UBSan's pointer-overflow check), so the build starts them first and compiles the other
# units beside them instead of waiting for them at the end (the top-level CMakeLists.txt includes this file
# before the other kernels for the same reason).
target_sources(flashattn PRIVATE
  ${PROJECT_SOURCE_DIR}/src/decode/decode_i8.cc
  ${PROJECT_SOURCE_DIR}/src/decode/decode_f32.cc
  ${PROJECT_SOURCE_DIR}/src/decode/decode.cc
  ${PROJECT_SOURCE_DIR}/src/decode/split_kv.cc
  ${PROJECT_SOURCE_DIR}/src/decode/decode_f16.cc
  ${PROJECT_SOURCE_DIR}/src/decode/decode_bf16.cc
  ${PROJECT_SOURCE_DIR}/src/decode/decode_fp8_e4m3.cc
  ${PROJECT_SOURCE_DIR}/src/decode/decode_fp8_e5m2.cc
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
                                  ${PROJECT_SOURCE_DIR}/src/decode/decode_fp8_e4m3.cc
                                  ${PROJECT_SOURCE_DIR}/src/decode/decode_fp8_e5m2.cc)
