// flash_attn_varlen_func: sequences packed along one token axis, q (total_q, Hq, d), k (total_k, Hkv, d),
// v (total_k, Hkv, dv), sequence b owning rows [cu_seqlens[b], cu_seqlens[b+1]). The forward pass is the
// library's forward_varlen; with dropout (which forward_varlen lacks) and for the backward pass, forward()
// and backward() run once per sequence with offset pointers, sequence b's dropout stream at offset b.
#include <pybind11/numpy.h>

#include <algorithm>
#include <vector>

#include "arrays.h"
#include "bindings.h"
#include "flashattn/backward.h"
#include "flashattn/decode.h"
#include "modifiers.h"

namespace flashattn::python {
namespace {

// The packed operands and the sequence boundaries of one varlen call, checked for rank, type and agreement.
struct Packed {
  Tensor q, k, v;
  py::array_t<std::int32_t> cu_q, cu_k;
  std::int64_t batch = 0;
};

// forward_varlen reads a stride of 0 as "contiguous"; a broadcast (zero-stride) dimension cannot be passed.
void CheckNoBroadcast(const Tensor& t) {
  for (int i = 0; i < 2; ++i) {
    if (t.dim(i) > 1 && t.stride(i) == 0) {
      throw py::value_error(
          t.name + " has stride 0 in dimension " + std::to_string(i) +
          " (a broadcast array), which varlen cannot address; pass numpy.ascontiguousarray(" + t.name + ")");
    }
  }
}

Packed CheckPacked(const py::handle& q_in, const py::handle& k_in, const py::handle& v_in,
                   const py::handle& cu_q_in, const py::handle& cu_k_in, bool bf16) {
  Packed s{AttentionTensor(q_in, "q", 3, "(total_q, heads_q, head_dim)", bf16),
           AttentionTensor(k_in, "k", 3, "(total_k, heads_kv, head_dim)", bf16),
           AttentionTensor(v_in, "v", 3, "(total_k, heads_kv, head_dim_v)", bf16),
           ExactArray<std::int32_t>(cu_q_in, "cu_seqlens_q", 1),
           ExactArray<std::int32_t>(cu_k_in, "cu_seqlens_k", 1)};
  CheckSameDType(s.q, s.k);
  CheckSameDType(s.q, s.v);
  CheckDim(s.k, 2, "head_dim", s.q.dim(2), s.q);
  CheckDim(s.v, 0, "total_k", s.k.dim(0), s.k);
  CheckDim(s.v, 1, "heads_kv", s.k.dim(1), s.k);
  for (const Tensor* t : {&s.q, &s.k, &s.v}) CheckNoBroadcast(*t);
  if (s.cu_q.shape(0) < 1) throw py::value_error("cu_seqlens_q must have batch + 1 >= 1 entries, got 0");
  if (s.cu_k.shape(0) != s.cu_q.shape(0)) {
    throw py::value_error("cu_seqlens_k has " + std::to_string(s.cu_k.shape(0)) +
                          " entries but cu_seqlens_q has " + std::to_string(s.cu_q.shape(0)) +
                          "; both must have batch + 1");
  }
  s.batch = s.cu_q.shape(0) - 1;
  return s;
}

VarlenParams MakeVarlenParams(const Packed& s, std::int64_t max_seqlen_q, std::int64_t max_seqlen_k,
                              const Modifiers& m) {
  VarlenParams p;
  AttentionParams& base = p.base;
  base.dtype = s.q.dtype;
  base.batch = s.batch;
  base.heads_q = s.q.dim(1), base.heads_kv = s.k.dim(1), base.head_dim = s.q.dim(2),
  base.head_dim_v = s.v.dim(2);
  ApplyModifiers(m, &base);
  p.total_q = s.q.dim(0), p.total_k = s.k.dim(0), p.batch = s.batch;
  p.q = s.q.data(), p.k = s.k.data(), p.v = s.v.data();
  p.q_row_stride = s.q.stride(0), p.q_head_stride = s.q.stride(1);
  p.k_row_stride = s.k.stride(0), p.k_head_stride = s.k.stride(1);
  p.v_row_stride = s.v.stride(0), p.v_head_stride = s.v.stride(1);
  p.cu_seqlens_q = s.cu_q.data(), p.cu_seqlens_k = s.cu_k.data();
  p.max_seqlen_q = max_seqlen_q, p.max_seqlen_k = max_seqlen_k;
  return p;
}

// Validates `p` as forward_varlen would, dropout aside: forward_varlen has none, this file adds it.
void ValidateIgnoringDropout(const VarlenParams& p) {
  VarlenParams check = p;
  check.base.dropout_p = 0.0f;
  Validate(check);
}

// Sequence b of a varlen call as a batch-1 problem over offset pointers (without o and lse). Its dropout
// stream is told apart from the other sequences' by dropout_offset = b.
AttentionParams SequenceParams(const VarlenParams& p, std::int64_t b) {
  AttentionParams a = p.base;
  const std::int64_t elem = static_cast<std::int64_t>(SizeOf(a.dtype));
  const std::int64_t q0 = p.cu_seqlens_q[b], k0 = p.cu_seqlens_k[b];
  a.batch = 1;
  a.seqlen_q = p.cu_seqlens_q[b + 1] - q0, a.seqlen_k = p.cu_seqlens_k[b + 1] - k0;
  a.alibi_batch_stride = 0;
  if (p.base.alibi_slopes != nullptr) a.alibi_slopes = p.base.alibi_slopes + b * p.base.alibi_batch_stride;
  a.q = static_cast<const char*>(p.q) + q0 * p.q_row_stride * elem;
  a.k = static_cast<const char*>(p.k) + k0 * p.k_row_stride * elem;
  a.v = static_cast<const char*>(p.v) + k0 * p.v_row_stride * elem;
  a.q_strides = {0, p.q_row_stride, p.q_head_stride};
  a.k_strides = {0, p.k_row_stride, p.k_head_stride};
  a.v_strides = {0, p.v_row_stride, p.v_head_stride};
  a.dropout_offset = static_cast<std::uint64_t>(b);
  return a;
}

py::tuple VarlenForward(const py::handle& q, const py::handle& k, const py::handle& v, const py::handle& cu_q,
                        const py::handle& cu_k, std::int64_t max_seqlen_q, std::int64_t max_seqlen_k,
                        const Modifiers& m, bool return_dropout_mask, bool bf16) {
  const Packed s = CheckPacked(q, k, v, cu_q, cu_k, bf16);
  VarlenParams p = MakeVarlenParams(s, max_seqlen_q, max_seqlen_k, m);
  const std::int64_t Hq = p.base.heads_q, dv = p.base.HeadDimV();
  py::array out = NewArray(s.q.dtype, {p.total_q, Hq, dv});
  py::array_t<float> lse({Hq, p.total_q});
  p.o = out.mutable_data(), p.lse = lse.mutable_data();
  if (p.base.dropout_p == 0.0f) {
    {
      py::gil_scoped_release release;
      forward_varlen(p);
    }
    return py::make_tuple(out, lse, py::none());
  }
  // With dropout: the sequences one by one, as forward_varlen does, each with its own dropout stream.
  ValidateIgnoringDropout(p);
  py::list keep;
  std::vector<float> seq_lse;
  const std::int64_t elem = static_cast<std::int64_t>(SizeOf(p.base.dtype));
  for (std::int64_t b = 0; b < p.batch; ++b) {
    AttentionParams a = SequenceParams(p, b);
    const std::int64_t q0 = p.cu_seqlens_q[b];
    a.o = static_cast<char*>(p.o) + q0 * Hq * dv * elem;
    a.o_strides = {0, Hq * dv, dv};
    seq_lse.assign(static_cast<std::size_t>(std::max<std::int64_t>(1, Hq * a.seqlen_q)), 0.0f);
    a.lse = seq_lse.data();
    py::object seq_keep = py::none();
    {
      py::gil_scoped_release release;
      forward(a);
    }
    for (std::int64_t h = 0; h < Hq; ++h)  // (Hq, Nq_b) into the packed (Hq, total_q)
      std::copy_n(seq_lse.data() + h * a.seqlen_q, a.seqlen_q, p.lse + h * p.total_q + q0);
    if (return_dropout_mask) {
      py::array_t<bool> mask({Hq, a.seqlen_q, a.seqlen_k});
      MaterializeDropoutMask(a, reinterpret_cast<std::uint8_t*>(mask.mutable_data()));
      keep.append(mask);
    }
  }
  return py::make_tuple(out, lse, return_dropout_mask ? py::object(keep) : py::none());
}

py::tuple VarlenBackward(const py::handle& dout_in, const py::handle& q, const py::handle& k,
                         const py::handle& v, const py::handle& out_in, const py::handle& lse_in,
                         const py::handle& cu_q, const py::handle& cu_k, std::int64_t max_seqlen_q,
                         std::int64_t max_seqlen_k, const Modifiers& m, bool bf16) {
  const Packed s = CheckPacked(q, k, v, cu_q, cu_k, bf16);
  const Tensor out = AttentionTensor(out_in, "out", 3, "(total_q, heads_q, head_dim_v)", bf16);
  const Tensor dout = AttentionTensor(dout_in, "dout", 3, "(total_q, heads_q, head_dim_v)", bf16);
  for (const Tensor* t : {&out, &dout}) {
    CheckSameDType(s.q, *t);
    CheckDim(*t, 0, "total_q", s.q.dim(0), s.q);
    CheckDim(*t, 1, "heads_q", s.q.dim(1), s.q);
    CheckDim(*t, 2, "head_dim_v", s.v.dim(2), s.v);
    CheckNoBroadcast(*t);
  }
  const auto lse = ExactArray<float>(lse_in, "softmax_lse", 2);
  if (lse.shape(0) != s.q.dim(1) || lse.shape(1) != s.q.dim(0)) {
    throw py::value_error(
        "softmax_lse must have shape (heads_q, total_q) = " + ShapeString({s.q.dim(1), s.q.dim(0)}) +
        ", got " + ShapeString({lse.shape(0), lse.shape(1)}));
  }
  VarlenParams p = MakeVarlenParams(s, max_seqlen_q, max_seqlen_k, m);
  p.o = const_cast<void*>(out.data());
  p.o_row_stride = out.stride(0), p.o_head_stride = out.stride(1);
  // Sizes, strides and cu_seqlens as the forward pass checks them (o and lse are only read here).
  ValidateIgnoringDropout(p);

  py::array dq = NewZeros(s.q.dtype, s.q.shape), dk = NewZeros(s.q.dtype, s.k.shape);
  py::array dv = NewZeros(s.q.dtype, s.v.shape);
  const AttentionParams& base = p.base;
  const std::int64_t Hq = base.heads_q, Hkv = base.heads_kv, d = base.head_dim, dv_dim = base.HeadDimV();
  const std::int64_t elem = static_cast<std::int64_t>(SizeOf(base.dtype)), total_q = p.total_q;
  auto at = [elem](const void* data, std::int64_t offset) {
    return const_cast<char*>(static_cast<const char*>(data)) + offset * elem;
  };
  {
    py::gil_scoped_release release;
    std::vector<float> seq_lse;
    for (std::int64_t b = 0; b < p.batch; ++b) {
      const std::int64_t q0 = p.cu_seqlens_q[b], k0 = p.cu_seqlens_k[b];
      BackwardParams bp;
      AttentionParams& a = bp.attention;
      a = SequenceParams(p, b);
      a.o = at(p.o, q0 * out.stride(0));
      a.o_strides = {0, out.stride(0), out.stride(1)};
      // The sequence's LSE rows, strided by total_q in the packed (Hq, total_q) layout, made contiguous.
      seq_lse.assign(static_cast<std::size_t>(std::max<std::int64_t>(1, Hq * a.seqlen_q)), 0.0f);
      for (std::int64_t h = 0; h < Hq; ++h)
        std::copy_n(lse.data() + h * total_q + q0, a.seqlen_q, seq_lse.data() + h * a.seqlen_q);
      a.lse = seq_lse.data();
      bp.d_o = at(dout.data(), q0 * dout.stride(0));
      bp.do_strides = {0, dout.stride(0), dout.stride(1)};
      bp.dq = at(dq.data(), q0 * Hq * d), bp.dk = at(dk.data(), k0 * Hkv * d),
      bp.dv = at(dv.data(), k0 * Hkv * dv_dim);
      bp.dq_strides = {0, Hq * d, d}, bp.dk_strides = {0, Hkv * d, d},
      bp.dv_strides = {0, Hkv * dv_dim, dv_dim};
      backward(bp);
    }
  }
  return py::make_tuple(dq, dk, dv);
}

}  // namespace

void RegisterVarlen(py::module_& m) {
  m.def("varlen_forward", &VarlenForward, py::arg("q"), py::arg("k"), py::arg("v"), py::kw_only(),
        py::arg("cu_seqlens_q"), py::arg("cu_seqlens_k"), py::arg("max_seqlen_q"), py::arg("max_seqlen_k"),
        py::arg("modifiers"), py::arg("return_dropout_mask") = false, py::arg("bf16") = false,
        "flash_attn_varlen_func's computation: returns (out, softmax_lse (Hq, total_q), per-sequence dropout "
        "keep masks (Hq, Nq_b, Nk_b) or None).");
  m.def("varlen_backward", &VarlenBackward, py::arg("dout"), py::arg("q"), py::arg("k"), py::arg("v"),
        py::arg("out"), py::arg("softmax_lse"), py::kw_only(), py::arg("cu_seqlens_q"),
        py::arg("cu_seqlens_k"), py::arg("max_seqlen_q"), py::arg("max_seqlen_k"), py::arg("modifiers"),
        py::arg("bf16") = false,
        "The gradients (dq, dk, dv) of flash_attn_varlen_func.");
}

}  // namespace flashattn::python
