// Variable-length batches (flash-attn's flash_attn_varlen_func): sequences of different lengths packed
// along one token axis, each computed as its own problem. backward_varlen (include/flashattn/backward.h)
// differentiates them.
#ifndef FLASHATTN_VARLEN_H_
#define FLASHATTN_VARLEN_H_

#include <cstdint>

#include "flashattn/export.h"
#include "flashattn/forward.h"
#include "flashattn/types.h"

namespace flashattn {

// The packed tensors:
//   q (total_q, Hq, d), k (total_k, Hkv, d), v (total_k, Hkv, dv), o (total_q, Hq, dv) of `dtype`;
//   lse optional float32 (Hq, total_q), contiguous;
//   cu_seqlens_q (batch + 1) int32: sequence b owns rows [cu_seqlens_q[b], cu_seqlens_q[b+1]); starts at 0,
//   non-decreasing, ends at total_q (likewise cu_seqlens_k). No length exceeds max_seqlen_q / max_seqlen_k.
// Sequence b is the batch-1 problem of its own rows, computed as forward() computes it: its causal mask and
// window are aligned bottom-right within the sequence; its ALiBi slopes are row b of (batch, Hq) when
// alibi_batch_stride is set, else the (Hq) slopes every sequence shares; its dropout is that of a batch-1
// problem at dropout_offset + b. The other settings (AttentionSettings, include/flashattn/types.h) apply
// to every sequence. Mask tensors are not supported.
struct VarlenParams : AttentionSettings {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  // Row and head strides of the packed tensors, in elements; 0 = contiguous.
  std::int64_t q_row_stride = 0, q_head_stride = 0;
  std::int64_t k_row_stride = 0, k_head_stride = 0;
  std::int64_t v_row_stride = 0, v_head_stride = 0;
  std::int64_t o_row_stride = 0, o_head_stride = 0;

  std::int64_t batch = 0;
  std::int64_t total_q = 0;
  std::int64_t total_k = 0;
  const std::int32_t* cu_seqlens_q = nullptr;
  const std::int32_t* cu_seqlens_k = nullptr;
  std::int64_t max_seqlen_q = 0;
  std::int64_t max_seqlen_k = 0;
};

// Checks everything, every cu_seqlens entry included, before anything is written.
FLASHATTN_API void validate(const VarlenParams& params);
FLASHATTN_API void forward_varlen(const VarlenParams& params, Algorithm algorithm = Algorithm::kFused);

// The dropout keep masks of every sequence, one after another: sequence b's mask is the (Hq, Nq_b, Nk_b)
// mask materialize_dropout_mask gives for its batch-1 problem, starting at element Σ_{b' < b} Hq·Nq_b'·Nk_b'.
FLASHATTN_API void materialize_dropout_mask(const VarlenParams& params, std::uint8_t* keep);

}  // namespace flashattn

#endif  // FLASHATTN_VARLEN_H_
