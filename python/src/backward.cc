// flash_attn_backward: the gradients (dq, dk, dv) of flash_attn_func from its inputs, its output and its
// softmax_lse, for the incoming gradient dout. The gradients are new arrays in the inputs' layout.
#include "flashattn/backward.h"

#include <pybind11/numpy.h>

#include "arrays.h"
#include "bindings.h"
#include "echo.h"
#include "modifiers.h"

namespace flashattn::python {
namespace {

py::tuple Backward(const py::handle& dout_in, const py::handle& q_in, const py::handle& k_in,
                   const py::handle& v_in, const py::handle& out_in, const py::handle& lse_in,
                   const Modifiers& m, bool bf16, const BlockPositionArgument& block_position) {
  const Tensor q = AttentionTensor(q_in, "q", 4, "(batch, seqlen_q, heads_q, head_dim)", bf16);
  const Tensor k = AttentionTensor(k_in, "k", 4, "(batch, seqlen_k, heads_kv, head_dim)", bf16);
  const Tensor v = AttentionTensor(v_in, "v", 4, "(batch, seqlen_k, heads_kv, head_dim_v)", bf16);
  const Tensor out = AttentionTensor(out_in, "out", 4, "(batch, seqlen_q, heads_q, head_dim_v)", bf16);
  const Tensor dout = AttentionTensor(dout_in, "dout", 4, "(batch, seqlen_q, heads_q, head_dim_v)", bf16);
  CheckQueryKeyValue(q, k, v, {"batch", "seqlen_k", "heads_kv", "head_dim"});
  for (const Tensor* t : {&out, &dout}) {
    CheckSameDType(q, *t);
    for (int i = 0; i < 3; ++i)
      CheckDim(*t, i, i == 0 ? "batch" : i == 1 ? "seqlen_q" : "heads_q", q.dim(i), q);
    CheckDim(*t, 3, "head_dim_v", v.dim(3), v);
  }
  const auto lse = ExactArray<float>(lse_in, "softmax_lse", 3);
  if (lse.shape(0) != q.dim(0) || lse.shape(1) != q.dim(2) || lse.shape(2) != q.dim(1)) {
    throw py::value_error("softmax_lse must have shape (batch, heads_q, seqlen_q) = " +
                          ShapeString({q.dim(0), q.dim(2), q.dim(1)}) + ", got " +
                          ShapeString({lse.shape(0), lse.shape(1), lse.shape(2)}));
  }

  BackwardParams b;
  AttentionParams& p = b.attention;
  p = AttentionInputs(q, k, v);
  p.o = const_cast<void*>(out.data());
  p.lse = const_cast<float*>(lse.data());  // read only: backward never writes attention.o or attention.lse
  p.o_strides = BatchStrides(out);
  ApplyModifiers(m, p.batch, &p);
  ApplySparsity(m, &p);
  ApplyBlockPosition(block_position, &p);
  b.d_o = dout.data();
  b.do_strides = BatchStrides(dout);

  py::array dq = NewZeros(p.dtype, q.shape), dk = NewZeros(p.dtype, k.shape), dv = NewZeros(p.dtype, v.shape);
  b.dq = dq.mutable_data(), b.dk = dk.mutable_data(), b.dv = dv.mutable_data();
  b.dq_strides = {p.seqlen_q * p.heads_q * p.head_dim, p.heads_q * p.head_dim, p.head_dim};
  b.dk_strides = {p.seqlen_k * p.heads_kv * p.head_dim, p.heads_kv * p.head_dim, p.head_dim};
  b.dv_strides = {p.seqlen_k * p.heads_kv * p.value_head_dim(), p.heads_kv * p.value_head_dim(), p.value_head_dim()};
  std::optional<py::array_t<float>> dsinks = NewSinkGradient(m, p.heads_q);
  if (dsinks) b.dsinks = dsinks->mutable_data();
  EchoIfEnabled(b);
  {
    py::gil_scoped_release release;
    backward(b);
  }
  return Gradients(dq, dk, dv, dsinks);
}

}  // namespace

void RegisterBackward(py::module_& m) {
  m.def("backward", &Backward, py::arg("dout"), py::arg("q"), py::arg("k"), py::arg("v"), py::arg("out"),
        py::arg("softmax_lse"), py::kw_only(), py::arg("modifiers"), py::arg("bf16") = false,
        py::arg("block_position") = py::none(),
        "flash_attn_backward's computation: returns (dq, dk, dv), and dsinks when the modifiers have sinks. "
        "block_position (private): as forward's.");
}

}  // namespace flashattn::python
