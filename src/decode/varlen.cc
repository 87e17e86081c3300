// forward_varlen: flash_attn_varlen_func on top of forward(). Sequence b is the problem
//   Q = q[cu_q[b] : cu_q[b+1]],  K, V = k, v[cu_k[b] : cu_k[b+1]]
// computed by forward() with offset pointers, so each sequence aligns its own causal mask bottom-right.
// Its LSE rows are strided by total_q in the packed (Hq, total_q) layout, which forward() cannot address;
// they are computed into a per-sequence buffer and copied.
#include "decode/varlen.h"

#include <algorithm>
#include <vector>

#include "flashattn/decode.h"

namespace flashattn {
namespace decoding {

AttentionParams PackedVarlenParams(const VarlenParams& p) {
  AttentionParams packed = p.base;
  const std::int64_t d = packed.head_dim, dv = packed.HeadDimV();
  auto or_default = [](std::int64_t stride, std::int64_t contiguous) { return stride != 0 ? stride : contiguous; };
  packed.q = p.q, packed.k = p.k, packed.v = p.v, packed.o = p.o, packed.lse = p.lse;
  packed.batch = 1;
  packed.seqlen_q = p.total_q;
  packed.seqlen_k = p.total_k;
  packed.q_strides = {0, or_default(p.q_row_stride, packed.heads_q * d), or_default(p.q_head_stride, d)};
  packed.k_strides = {0, or_default(p.k_row_stride, packed.heads_kv * d), or_default(p.k_head_stride, d)};
  packed.v_strides = {0, or_default(p.v_row_stride, packed.heads_kv * dv), or_default(p.v_head_stride, dv)};
  packed.o_strides = {0, or_default(p.o_row_stride, packed.heads_q * dv), or_default(p.o_head_stride, dv)};
  packed.alibi_batch_stride = 0;
  return packed;
}

}  // namespace decoding

namespace {

void Run(const VarlenParams& p, const Algorithm* algorithm) {
  Validate(p);
  const AttentionParams packed = decoding::PackedVarlenParams(p);
  const std::int64_t elem = static_cast<std::int64_t>(SizeOf(packed.dtype));
  std::vector<float> lse;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t q0 = p.cu_seqlens_q[b], k0 = p.cu_seqlens_k[b];
    AttentionParams seq = packed;
    seq.seqlen_q = p.cu_seqlens_q[b + 1] - q0;
    seq.seqlen_k = p.cu_seqlens_k[b + 1] - k0;
    seq.q = static_cast<const char*>(p.q) + q0 * packed.q_strides.seq * elem;
    seq.k = static_cast<const char*>(p.k) + k0 * packed.k_strides.seq * elem;
    seq.v = static_cast<const char*>(p.v) + k0 * packed.v_strides.seq * elem;
    seq.o = static_cast<char*>(p.o) + q0 * packed.o_strides.seq * elem;
    if (p.base.alibi_slopes != nullptr) seq.alibi_slopes = p.base.alibi_slopes + b * p.base.alibi_batch_stride;
    lse.assign(static_cast<std::size_t>(std::max<std::int64_t>(1, seq.heads_q * seq.seqlen_q)), 0.0f);
    seq.lse = p.lse != nullptr ? lse.data() : nullptr;
    if (algorithm != nullptr) forward(seq, *algorithm); else forward(seq);
    if (p.lse == nullptr) continue;
    for (std::int64_t h = 0; h < seq.heads_q; ++h)  // (Hq, Nq_b) into the packed (Hq, total_q)
      std::copy_n(&lse[h * seq.seqlen_q], seq.seqlen_q, p.lse + h * p.total_q + q0);
  }
}

}  // namespace

void forward_varlen(const VarlenParams& params) { Run(params, nullptr); }
void forward_varlen(const VarlenParams& params, Algorithm algorithm) { Run(params, &algorithm); }

}  // namespace flashattn
