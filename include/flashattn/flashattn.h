// flashattn: exact, IO-aware attention for CPUs. The one header a user includes; it includes the others:
//
//   flashattn/types.h     Error, DType, Strides, MaskTensor, Tiling, ScoreSettings, HeadSettings,
//                         AttentionSettings
//   flashattn/forward.h   Algorithm, AttentionParams, validate, forward, materialize_dropout_mask
//   flashattn/varlen.h    VarlenParams, forward_varlen: packed sequences of different lengths
//   flashattn/merge.h     MergeParams, merge_attention_states: partial results merged by their LSE
//   flashattn/decode.h    DecodeParams, decode: new query rows against a (paged) key/value cache
//   flashattn/backward.h  BackwardParams, backward, VarlenBackwardParams, backward_varlen: the gradients
//   flashattn/indexer.h   IndexerParams, lightning_indexer: DeepSeek-V3.2's top-k key selection
//   flashattn/working_memory.h  set_working_memory_limit, release_working_memory: the working memory that
//                         calling threads keep between calls
//   flashattn/fields.h    for_each_field: every field of the parameter structs, by name
//   flashattn/export.h    FLASHATTN_API, the mark of what a shared library exports
//
// Naming: types and enums are PascalCase (AttentionParams, DType); enumerators and constants are kPascalCase
// (DType::kF32, kMaxHeadDim); functions and member functions are snake_case (forward, validate,
// set_contiguous_strides); fields are snake_case (seqlen_q, head_dim_v).
//
// Every call checks its arguments before it writes anything: bad input throws flashattn::Error naming the
// argument and the offending values, and leaves everything the caller owns unchanged. validate(params)
// runs the same checks alone. docs/algorithms.md derives the algorithms; docs/python.md maps the calls to
// flash-attn's Python functions.
#ifndef FLASHATTN_FLASHATTN_H_
#define FLASHATTN_FLASHATTN_H_

#include "flashattn/backward.h"
#include "flashattn/decode.h"
#include "flashattn/export.h"
#include "flashattn/fields.h"
#include "flashattn/forward.h"
#include "flashattn/indexer.h"
#include "flashattn/merge.h"
#include "flashattn/types.h"
#include "flashattn/varlen.h"
#include "flashattn/working_memory.h"

#endif  // FLASHATTN_FLASHATTN_H_
