// flash_attn_func: q (batch, Nq, Hq, d), k (batch, Nk, Hkv, d), v (batch, Nk, Hkv, dv), used in place
// through their strides; out (batch, Nq, Hq, dv) and softmax_lse (batch, Hq, Nq) float32 are new arrays.
#include <pybind11/numpy.h>

#include "arrays.h"
#include "bindings.h"
#include "echo.h"
#include "flashattn/backward.h"
#include "flashattn/flashattn.h"
#include "modifiers.h"

namespace flashattn::python {
namespace {

constexpr const char* kQLayout = "(batch, seqlen_q, heads_q, head_dim)";
constexpr const char* kKLayout = "(batch, seqlen_k, heads_kv, head_dim)";

py::tuple Forward(const py::handle& q_in, const py::handle& k_in, const py::handle& v_in, const Modifiers& m,
                  bool return_lse, bool return_dropout_mask, bool bf16, const BlockPositionArgument& block_position,
                  const py::object& key_indices) {
  const Tensor q = AttentionTensor(q_in, "q", 4, kQLayout, bf16);
  const Tensor k = AttentionTensor(k_in, "k", 4, kKLayout, bf16);
  const Tensor v = AttentionTensor(v_in, "v", 4, "(batch, seqlen_k, heads_kv, head_dim_v)", bf16);
  CheckQueryKeyValue(q, k, v, {"batch", "seqlen_k", "heads_kv", "head_dim"});

  AttentionParams p = AttentionInputs(q, k, v);
  ApplyModifiers(m, p.batch, &p);
  ApplySparsity(m, &p);
  ApplyBlockPosition(block_position, &p);
  p.key_indices = SelectedKeysOf(key_indices, {p.batch, p.seqlen_q}, p.heads_kv, "(batch, seqlen_q, heads_kv, k)");

  py::array out = NewArray(p.dtype, {p.batch, p.seqlen_q, p.heads_q, p.value_head_dim()});
  p.o = out.mutable_data();
  p.o_strides = {p.seqlen_q * p.heads_q * p.value_head_dim(), p.heads_q * p.value_head_dim(), p.value_head_dim()};
  py::object lse = py::none();
  if (return_lse) {
    py::array_t<float> lse_array({p.batch, p.heads_q, p.seqlen_q});
    p.lse = lse_array.mutable_data();
    lse = lse_array;
  }
  py::object keep = py::none();
  EchoIfEnabled(p);
  {
    py::gil_scoped_release release;
    forward(p);
  }
  if (return_dropout_mask && p.dropout_p > 0.0f) {
    py::array_t<bool> keep_array({p.batch, p.heads_q, p.seqlen_q, p.seqlen_k});
    auto* data = reinterpret_cast<std::uint8_t*>(keep_array.mutable_data());
    {
      py::gil_scoped_release release;
      materialize_dropout_mask(p, data);
    }
    keep = keep_array;
  }
  return py::make_tuple(out, lse, keep);
}

}  // namespace

void RegisterForward(py::module_& m) {
  m.def("forward", &Forward, py::arg("q"), py::arg("k"), py::arg("v"), py::kw_only(), py::arg("modifiers"),
        py::arg("return_lse"), py::arg("return_dropout_mask"), py::arg("bf16") = false,
        py::arg("block_position") = py::none(), py::arg("key_indices") = py::none(),
        "flash_attn_func's computation: returns (out, softmax_lse or None, dropout keep mask or None). "
        "key_indices: int32 (batch, seqlen_q, heads_kv, k), the selected keys of each row (-1 = unused). "
        "block_position (private): (query_start, key_start, total_seqlen_q, total_seqlen_k) of a call that is "
        "one block of a larger problem.");
}

}  // namespace flashattn::python
