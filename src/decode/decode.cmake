# Flash-Decoding: merge_attention_states, decode over a KV cache (the kernel: one translation unit per element
# type, each compiled for every Highway target, src/simd/dispatch.h), and forward_varlen.
set(flashattn_decode ${CMAKE_CURRENT_LIST_DIR})
target_sources(flashattn PRIVATE
  ${flashattn_decode}/decode.cc ${flashattn_decode}/split_kv.cc ${flashattn_decode}/merge.cc
  ${flashattn_decode}/decode_f32.cc ${flashattn_decode}/decode_f16.cc ${flashattn_decode}/decode_bf16.cc
  ${flashattn_decode}/varlen.cc)
