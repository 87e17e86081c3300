// flash_attn_varlen_func: sequences packed along one token axis, q (total_q, Hq, d), k (total_k, Hkv, d),
// v (total_k, Hkv, dv), sequence b owning rows [cu_seqlens[b], cu_seqlens[b+1]): the library's
// forward_varlen and backward_varlen, sequence b's dropout stream at offset b.
#include <pybind11/numpy.h>

#include <cstdint>

#include "arrays.h"
#include "bindings.h"
#include "echo.h"
#include "flashattn/backward.h"
#include "flashattn/varlen.h"
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
  p.dtype = s.q.dtype;
  p.heads_q = s.q.dim(1), p.heads_kv = s.k.dim(1), p.head_dim = s.q.dim(2), p.head_dim_v = s.v.dim(2);
  ApplyModifiers(m, s.batch, &p);
  p.total_q = s.q.dim(0), p.total_k = s.k.dim(0), p.batch = s.batch;
  p.q = s.q.data(), p.k = s.k.data(), p.v = s.v.data();
  p.q_row_stride = s.q.stride(0), p.q_head_stride = s.q.stride(1);
  p.k_row_stride = s.k.stride(0), p.k_head_stride = s.k.stride(1);
  p.v_row_stride = s.v.stride(0), p.v_head_stride = s.v.stride(1);
  p.cu_seqlens_q = s.cu_q.data(), p.cu_seqlens_k = s.cu_k.data();
  p.max_seqlen_q = max_seqlen_q, p.max_seqlen_k = max_seqlen_k;
  return p;
}

// The keep mask of every sequence b, (Hq, Nq_b, Nk_b), as views of the one buffer the library fills.
py::list DropoutMasks(const VarlenParams& p) {
  std::int64_t total = 0;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    total += p.heads_q * (p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b]) * (p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b]);
  }
  py::array_t<bool> keep(total);
  {
    py::gil_scoped_release release;
    materialize_dropout_mask(p, reinterpret_cast<std::uint8_t*>(keep.mutable_data()));
  }
  py::list masks;
  std::int64_t start = 0;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t Nq = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b], Nk = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
    const py::slice rows(start, start + p.heads_q * Nq * Nk, 1);
    masks.append(keep[rows].attr("reshape")(p.heads_q, Nq, Nk));
    start += p.heads_q * Nq * Nk;
  }
  return masks;
}

py::tuple VarlenForward(const py::handle& q, const py::handle& k, const py::handle& v, const py::handle& cu_q,
                        const py::handle& cu_k, std::int64_t max_seqlen_q, std::int64_t max_seqlen_k,
                        const Modifiers& m, bool return_dropout_mask, bool bf16) {
  const Packed s = CheckPacked(q, k, v, cu_q, cu_k, bf16);
  VarlenParams p = MakeVarlenParams(s, max_seqlen_q, max_seqlen_k, m);
  py::array out = NewArray(s.q.dtype, {p.total_q, p.heads_q, p.value_head_dim()});
  py::array_t<float> lse({p.heads_q, p.total_q});
  p.o = out.mutable_data(), p.lse = lse.mutable_data();
  EchoIfEnabled(p);
  {
    py::gil_scoped_release release;
    forward_varlen(p);
  }
  const bool masks = return_dropout_mask && p.dropout_p > 0.0f;
  return py::make_tuple(out, lse, masks ? py::object(DropoutMasks(p)) : py::none());
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
  VarlenBackwardParams p;
  p.forward = MakeVarlenParams(s, max_seqlen_q, max_seqlen_k, m);
  p.forward.o = const_cast<void*>(out.data());  // read only: backward_varlen never writes forward.o or lse
  p.forward.o_row_stride = out.stride(0), p.forward.o_head_stride = out.stride(1);
  p.forward.lse = const_cast<float*>(lse.data());
  p.d_o = dout.data();
  p.do_row_stride = dout.stride(0), p.do_head_stride = dout.stride(1);
  py::array dq = NewZeros(s.q.dtype, s.q.shape), dk = NewZeros(s.q.dtype, s.k.shape);
  py::array dv = NewZeros(s.q.dtype, s.v.shape);
  p.dq = dq.mutable_data(), p.dk = dk.mutable_data(), p.dv = dv.mutable_data();  // contiguous: strides 0
  std::optional<py::array_t<float>> dsinks = NewSinkGradient(m, p.forward.heads_q);
  if (dsinks) p.dsinks = dsinks->mutable_data();
  EchoIfEnabled(p);
  {
    py::gil_scoped_release release;
    backward_varlen(p);
  }
  return Gradients(dq, dk, dv, dsinks);
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
        "The gradients (dq, dk, dv) of flash_attn_varlen_func, and dsinks when the modifiers have sinks.");
}

}  // namespace flashattn::python
