#include "varlen/sequences.h"

#include <algorithm>
#include <type_traits>
#include <vector>

namespace flashattn::varlen {
namespace {

std::int64_t OrContiguous(std::int64_t stride, std::int64_t contiguous) {
  return stride != 0 ? stride : contiguous;
}

// A packed (total, heads, dim) tensor's strides as those of a batch-1 (batch, seq, head, dim) tensor.
Strides PackedStrides(std::int64_t row_stride, std::int64_t head_stride, std::int64_t heads, std::int64_t dim) {
  return {0, OrContiguous(row_stride, heads * dim), OrContiguous(head_stride, dim)};
}

// `pointer` moved by `rows` rows of `row_stride` elements.
template <typename Pointer>
Pointer OffsetRows(Pointer pointer, std::int64_t rows, std::int64_t row_stride, std::int64_t element_bytes) {
  using Byte = std::conditional_t<std::is_const_v<std::remove_pointer_t<Pointer>>, const char, char>;
  return static_cast<Pointer>(static_cast<Byte*>(pointer) + rows * row_stride * element_bytes);
}

// Moves the problem's tensors to the first query row q0 and key row k0 of a sequence.
void OffsetRows(AttentionParams* a, std::int64_t q0, std::int64_t k0, std::int64_t element_bytes) {
  a->q = OffsetRows(a->q, q0, a->q_strides.seq, element_bytes);
  a->o = OffsetRows(a->o, q0, a->o_strides.seq, element_bytes);
  a->k = OffsetRows(a->k, k0, a->k_strides.seq, element_bytes);
  a->v = OffsetRows(a->v, k0, a->v_strides.seq, element_bytes);
}

void OffsetRows(BackwardParams* p, std::int64_t q0, std::int64_t k0, std::int64_t element_bytes) {
  OffsetRows(&p->attention, q0, k0, element_bytes);
  p->d_o = OffsetRows(p->d_o, q0, p->do_strides.seq, element_bytes);
  p->dq = OffsetRows(p->dq, q0, p->dq_strides.seq, element_bytes);
  p->dk = OffsetRows(p->dk, k0, p->dk_strides.seq, element_bytes);
  p->dv = OffsetRows(p->dv, k0, p->dv_strides.seq, element_bytes);
}

AttentionParams& Attention(AttentionParams& p) { return p; }
AttentionParams& Attention(BackwardParams& p) { return p.attention; }

template <typename Problem>
void Drive(const VarlenParams& v, const Problem& packed, LseUse use,
           const std::function<void(const Problem&)>& compute) {
  const std::int64_t element_bytes = static_cast<std::int64_t>(size_of(v.dtype)), Hq = v.heads_q;
  const bool copies_out = use == LseUse::kWritten && v.lse != nullptr;
  std::vector<float> lse;
  for (std::int64_t b = 0; b < v.batch; ++b) {
    const std::int64_t q0 = v.cu_seqlens_q[b], k0 = v.cu_seqlens_k[b];
    Problem sequence = packed;
    AttentionParams& a = Attention(sequence);
    a.seqlen_q = v.cu_seqlens_q[b + 1] - q0;
    a.seqlen_k = v.cu_seqlens_k[b + 1] - k0;
    OffsetRows(&sequence, q0, k0, element_bytes);
    if (v.alibi_slopes != nullptr) a.alibi_slopes = v.alibi_slopes + b * v.alibi_batch_stride;
    a.dropout_offset = v.dropout_offset + static_cast<std::uint64_t>(b);
    a.lse = nullptr;
    if (use == LseUse::kRead || copies_out) {
      lse.assign(static_cast<std::size_t>(std::max<std::int64_t>(1, Hq * a.seqlen_q)), 0.0f);
      a.lse = lse.data();
    }
    if (use == LseUse::kRead && v.lse != nullptr) {
      for (std::int64_t h = 0; h < Hq; ++h)
        std::copy_n(v.lse + h * v.total_q + q0, a.seqlen_q, &lse[h * a.seqlen_q]);
    }
    compute(sequence);
    if (copies_out) {
      for (std::int64_t h = 0; h < Hq; ++h)
        std::copy_n(&lse[h * a.seqlen_q], a.seqlen_q, v.lse + h * v.total_q + q0);
    }
  }
}

}  // namespace

AttentionParams PackedProblem(const VarlenParams& p) {
  AttentionParams packed;
  static_cast<AttentionSettings&>(packed) = p;
  const std::int64_t d = p.head_dim, dv = p.value_head_dim();
  packed.q = p.q, packed.k = p.k, packed.v = p.v, packed.o = p.o, packed.lse = p.lse;
  packed.batch = 1;
  packed.seqlen_q = p.total_q;
  packed.seqlen_k = p.total_k;
  packed.q_strides = PackedStrides(p.q_row_stride, p.q_head_stride, p.heads_q, d);
  packed.k_strides = PackedStrides(p.k_row_stride, p.k_head_stride, p.heads_kv, d);
  packed.v_strides = PackedStrides(p.v_row_stride, p.v_head_stride, p.heads_kv, dv);
  packed.o_strides = PackedStrides(p.o_row_stride, p.o_head_stride, p.heads_q, dv);
  packed.alibi_slopes = nullptr;
  packed.alibi_batch_stride = 0;
  return packed;
}

BackwardParams PackedProblem(const VarlenBackwardParams& p) {
  BackwardParams packed;
  packed.attention = PackedProblem(p.forward);
  const std::int64_t Hq = p.forward.heads_q, Hkv = p.forward.heads_kv;
  const std::int64_t d = p.forward.head_dim, dv = p.forward.value_head_dim();
  packed.d_o = p.d_o, packed.dq = p.dq, packed.dk = p.dk, packed.dv = p.dv, packed.dsinks = p.dsinks;
  packed.do_strides = PackedStrides(p.do_row_stride, p.do_head_stride, Hq, dv);
  packed.dq_strides = PackedStrides(p.dq_row_stride, p.dq_head_stride, Hq, d);
  packed.dk_strides = PackedStrides(p.dk_row_stride, p.dk_head_stride, Hkv, d);
  packed.dv_strides = PackedStrides(p.dv_row_stride, p.dv_head_stride, Hkv, dv);
  return packed;
}

void ForEachSequence(const VarlenParams& params, LseUse lse,
                     const std::function<void(const AttentionParams&)>& compute) {
  Drive(params, PackedProblem(params), lse, compute);
}

void ForEachSequence(const VarlenBackwardParams& params, const std::function<void(const BackwardParams&)>& compute) {
  if (params.dsinks == nullptr) return Drive(params.forward, PackedProblem(params), LseUse::kRead, compute);
  // dsinks sums over every sequence's rows: each sequence's call writes its own share, added here in order.
  const std::size_t heads = static_cast<std::size_t>(params.forward.heads_q);
  std::vector<float> total(heads, 0.0f), share(heads);
  const std::function<void(const BackwardParams&)> compute_share = [&](const BackwardParams& sequence) {
    BackwardParams with_share = sequence;
    with_share.dsinks = share.data();
    compute(with_share);
    for (std::size_t h = 0; h < heads; ++h) total[h] += share[h];
  };
  Drive(params.forward, PackedProblem(params), LseUse::kRead, compute_share);
  std::copy(total.begin(), total.end(), params.dsinks);
}

}  // namespace flashattn::varlen
