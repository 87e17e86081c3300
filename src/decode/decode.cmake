# Flash-Decoding: merge_attention_states and decode over a KV cache. Added to the flashattn library target
# (included by the top-level CMakeLists.txt).
target_sources(flashattn PRIVATE
  ${PROJECT_SOURCE_DIR}/src/decode/attend.cc
  ${PROJECT_SOURCE_DIR}/src/decode/decode.cc
  ${PROJECT_SOURCE_DIR}/src/decode/merge.cc
  ${PROJECT_SOURCE_DIR}/src/reference/decode.cc
  ${PROJECT_SOURCE_DIR}/src/reference/merge.cc
)
