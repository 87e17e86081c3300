// backward_varlen: flash-attn's varlen backward on top of backward(). Sequence b is the problem
//   Q, dO, dQ = rows [cu_q[b], cu_q[b+1]) of the packed q, d_o, dq;  K, V, dK, dV = rows [cu_k[b], cu_k[b+1])
// differentiated by backward() with offset pointers. Its LSE rows are strided by total_q in the packed
// (Hq, total_q) layout, which backward() cannot address, so they are gathered into a per-sequence buffer.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "decode/varlen.h"
#include "flashattn/backward.h"

namespace flashattn {
namespace {

// The packed tensors as one batch-1 backward problem of total_q queries and total_k keys, default strides
// filled in: validating it checks every pointer, stride, size and overlap of the whole packed call.
BackwardParams PackedBackwardParams(const VarlenBackwardParams& p) {
  BackwardParams packed;
  packed.attention = decoding::PackedVarlenParams(p.forward);
  const AttentionParams& a = packed.attention;
  const std::int64_t d = a.head_dim, dv = a.HeadDimV();
  auto or_default = [](std::int64_t stride, std::int64_t contiguous) { return stride != 0 ? stride : contiguous; };
  packed.d_o = p.d_o, packed.dq = p.dq, packed.dk = p.dk, packed.dv = p.dv;
  packed.do_strides = {0, or_default(p.do_row_stride, a.heads_q * dv), or_default(p.do_head_stride, dv)};
  packed.dq_strides = {0, or_default(p.dq_row_stride, a.heads_q * d), or_default(p.dq_head_stride, d)};
  packed.dk_strides = {0, or_default(p.dk_row_stride, a.heads_kv * d), or_default(p.dk_head_stride, d)};
  packed.dv_strides = {0, or_default(p.dv_row_stride, a.heads_kv * dv), or_default(p.dv_head_stride, dv)};
  return packed;
}

template <typename Pointer>
Pointer Offset(Pointer base, std::int64_t row, std::int64_t row_stride, std::int64_t element_bytes) {
  using Byte = std::conditional_t<std::is_const_v<std::remove_pointer_t<Pointer>>, const char, char>;
  return static_cast<Pointer>(static_cast<Byte*>(base) + row * row_stride * element_bytes);
}

}  // namespace

void Validate(const VarlenBackwardParams& p) {
  Validate(p.forward);
  Validate(PackedBackwardParams(p));
}

void backward_varlen(const VarlenBackwardParams& p, BackwardAlgorithm algorithm) {
  Validate(p);
  const BackwardParams packed = PackedBackwardParams(p);
  const AttentionParams& a = packed.attention;
  const std::int64_t elem = static_cast<std::int64_t>(SizeOf(a.dtype));
  std::vector<float> lse;
  for (std::int64_t b = 0; b < p.forward.batch; ++b) {
    const std::int64_t q0 = p.forward.cu_seqlens_q[b], k0 = p.forward.cu_seqlens_k[b];
    BackwardParams seq = packed;
    AttentionParams& s = seq.attention;
    s.seqlen_q = p.forward.cu_seqlens_q[b + 1] - q0;
    s.seqlen_k = p.forward.cu_seqlens_k[b + 1] - k0;
    s.q = Offset(a.q, q0, a.q_strides.seq, elem);
    s.o = Offset(a.o, q0, a.o_strides.seq, elem);
    s.k = Offset(a.k, k0, a.k_strides.seq, elem);
    s.v = Offset(a.v, k0, a.v_strides.seq, elem);
    seq.d_o = Offset(packed.d_o, q0, packed.do_strides.seq, elem);
    seq.dq = Offset(packed.dq, q0, packed.dq_strides.seq, elem);
    seq.dk = Offset(packed.dk, k0, packed.dk_strides.seq, elem);
    seq.dv = Offset(packed.dv, k0, packed.dv_strides.seq, elem);
    if (a.alibi_slopes != nullptr) s.alibi_slopes = p.forward.base.alibi_slopes + b * p.forward.base.alibi_batch_stride;
    lse.assign(static_cast<std::size_t>(std::max<std::int64_t>(1, s.heads_q * s.seqlen_q)), 0.0f);
    for (std::int64_t h = 0; h < s.heads_q; ++h)  // the packed (Hq, total_q) rows of this sequence
      std::copy_n(p.forward.lse + h * p.forward.total_q + q0, s.seqlen_q, &lse[h * s.seqlen_q]);
    s.lse = lse.data();
    backward(seq, algorithm);
  }
}

}  // namespace flashattn
