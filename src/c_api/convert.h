// The C API's structs (include/flashattn/c_api.h) turned into the C++ API's: the one mapping the entry points
// use (c_api.cc), field by field, and the defaults the *_init functions give. tests/c_api_fields_test.cc
// holds every field of it to the C++ field of the same name (for_each_field, include/flashattn/fields.h).
// A conversion throws Error for an enum value the C++ API does not have.
#ifndef FLASHATTN_C_API_CONVERT_H_
#define FLASHATTN_C_API_CONVERT_H_

#include <cstring>

#include "flashattn/backward.h"
#include "flashattn/c_api.h"
#include "flashattn/decode.h"
#include "flashattn/flashattn.h"

namespace flashattn::c_api {

// The int a C enum object holds. A C caller may store any int there, but C++ may load an enum only as a value
// in the range of its enumerators: its bytes are read instead, and each conversion below rejects a value it
// does not know (so the enums are passed by reference, never loaded).
template <typename Enum>
int RawValue(const Enum& value) {
  static_assert(sizeof(Enum) == sizeof(int));
  int raw;
  std::memcpy(&raw, &value, sizeof raw);
  return raw;
}

Algorithm ToAlgorithm(const flashattn_algorithm& algorithm);
BackwardAlgorithm ToBackwardAlgorithm(const flashattn_backward_algorithm& algorithm);

AttentionParams ToCpp(const flashattn_attention_params& c);
VarlenParams ToCpp(const flashattn_varlen_params& c);
MergeParams ToCpp(const flashattn_merge_params& c);
DecodeParams ToCpp(const flashattn_decode_params& c);
QuantizeParams ToCpp(const flashattn_quantize_params& c);
IndexerParams ToCpp(const flashattn_indexer_params& c);
BackwardParams ToCpp(const flashattn_backward_params& c);
VarlenBackwardParams ToCpp(const flashattn_varlen_backward_params& c);

// The strides of a C++ struct, after its set_contiguous_strides or set_head_major_strides, copied into the C
// struct it was made from.
void CopyStrides(const AttentionParams& p, flashattn_attention_params& c);
void CopyStrides(const MergeParams& p, flashattn_merge_params& c);
void CopyStrides(const DecodeParams& p, flashattn_decode_params& c);
void CopyStrides(const QuantizeParams& p, flashattn_quantize_params& c);
void CopyStrides(const IndexerParams& p, flashattn_indexer_params& c);
void CopyStrides(const BackwardParams& p, flashattn_backward_params& c);

// The defaults: zero, except the fields whose C++ member initializer is not zero.
flashattn_attention_params DefaultAttention();
flashattn_varlen_params DefaultVarlen();
flashattn_merge_params DefaultMerge();
flashattn_decode_params DefaultDecode();
flashattn_quantize_params DefaultQuantize();
flashattn_indexer_params DefaultIndexer();
flashattn_backward_params DefaultBackward();
flashattn_varlen_backward_params DefaultVarlenBackward();

}  // namespace flashattn::c_api

#endif  // FLASHATTN_C_API_CONVERT_H_
