# Flash-Decoding (issue 4): merge_attention_states, decode over a KV cache, forward_varlen. Added to the
# flashattn library target (included by the top-level CMakeLists.txt).
target_sources(flashattn PRIVATE
  ${PROJECT_SOURCE_DIR}/src/decode/attend.cc
  ${PROJECT_SOURCE_DIR}/src/decode/decode.cc
  ${PROJECT_SOURCE_DIR}/src/decode/merge.cc
  ${PROJECT_SOURCE_DIR}/src/decode/varlen.cc
  ${PROJECT_SOURCE_DIR}/src/reference/decode.cc
  ${PROJECT_SOURCE_DIR}/src/reference/merge.cc
)
