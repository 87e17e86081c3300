// The one driver of the variable-length calls: a packed batch cut into the batch-1 problems of its sequences.
// Sequence b is
//   Q, O, dO, dQ = rows [cu_q[b], cu_q[b+1]) of the packed q, o, d_o, dq;
//   K, V, dK, dV = rows [cu_k[b], cu_k[b+1]) of the packed k, v, dk, dv,
// addressed through offset pointers, so each sequence aligns its own masks bottom-right; its ALiBi slopes are
// row b of the packed ones (when alibi_batch_stride is set) and its dropout stream is dropout_offset + b.
// forward_varlen, backward_varlen and the varlen dropout mask all run through ForEachSequence.
#ifndef FLASHATTN_VARLEN_SEQUENCES_H_
#define FLASHATTN_VARLEN_SEQUENCES_H_

#include <cstdint>
#include <functional>

#include "flashattn/backward.h"
#include "flashattn/forward.h"
#include "flashattn/varlen.h"

namespace flashattn::varlen {

// The packed tensors as one batch-1 problem of total_q queries and total_k keys, strides of 0 replaced by
// the contiguous ones and without ALiBi slopes (their rows are per sequence). Its lse layout (1, Hq,
// total_q) is the packed (Hq, total_q). Validating its tensors checks every pointer, stride, size and
// overlap of the packed call. The sizes must have been checked: the contiguous strides are products of them.
AttentionParams PackedProblem(const VarlenParams& params);
BackwardParams PackedProblem(const VarlenBackwardParams& params);

// What a sequence's computation does with the LSE. Sequence b's LSE rows are strided by total_q in the
// packed (Hq, total_q) layout, which a batch-1 problem cannot address: the driver hands each problem a
// contiguous (Hq, Nq_b) buffer and copies it out of the packed lse after the computation, or into it before.
enum class LseUse : std::uint8_t {
  kNone,     // the problem's lse is null and the packed lse is not touched
  kWritten,  // forward: the buffer is copied into the packed lse, if there is one
  kRead,     // backward: the packed lse rows are copied into the buffer
};

// Calls compute(problem) with the problem of every sequence of a validated call, in order.
void ForEachSequence(const VarlenParams& params, LseUse lse,
                     const std::function<void(const AttentionParams&)>& compute);
void ForEachSequence(const VarlenBackwardParams& params, const std::function<void(const BackwardParams&)>& compute);

}  // namespace flashattn::varlen

#endif  // FLASHATTN_VARLEN_SEQUENCES_H_
