// forward_varlen's view of its packed tensors (shared with validate.cc).
#ifndef FLASHATTN_DECODE_VARLEN_H_
#define FLASHATTN_DECODE_VARLEN_H_

#include "flashattn/decode.h"

namespace flashattn::decoding {

// The packed tensors as a single problem of total_q queries and total_k keys (batch 1), with the default
// strides filled in. Its lse layout (1, Hq, total_q) is forward_varlen's (Hq, total_q).
AttentionParams PackedVarlenParams(const VarlenParams& params);

}  // namespace flashattn::decoding

#endif  // FLASHATTN_DECODE_VARLEN_H_
