// scaled_dot_product_attention with PyTorch's semantics: (batch, heads, L, E) layout, causal aligned
// top-left, attn_mask boolean (True = attend) or additive, broadcast by the Python layer to (batch, heads,
// L, S) with zero strides.
//
// The library's causal mask is aligned bottom-right (query i sees key j ≤ i + S − L). Top-left causal
// (j ≤ i) is expressed exactly without a mask tensor: no query sees a key beyond L − 1, so only the first
// S' = min(L, S) keys take part, and on those j ≤ i is the window (−1, L − S'), since i + S' − L + (L − S')
// = i. The keys beyond S' get zero gradients.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <optional>

#include "arrays.h"
#include "bindings.h"
#include "echo.h"
#include "flashattn/backward.h"
#include "flashattn/flashattn.h"

namespace flashattn::python {
namespace {

struct Sdpa {
  Tensor query, key, value;
  std::optional<py::array> mask;
  AttentionParams params;
};

Sdpa Prepare(const py::handle& query_in, const py::handle& key_in, const py::handle& value_in,
             const py::handle& mask_in, float dropout_p, bool is_causal, std::optional<float> scale,
             bool enable_gqa, std::uint64_t seed, bool bf16) {
  Sdpa s{AttentionTensor(query_in, "query", 4, "(batch, heads, L, E)", bf16),
         AttentionTensor(key_in, "key", 4, "(batch, heads_kv, S, E)", bf16),
         AttentionTensor(value_in, "value", 4, "(batch, heads_kv, S, Ev)", bf16),
         std::nullopt,
         {}};
  const Tensor &q = s.query, &k = s.key, &v = s.value;
  CheckQueryKeyValue(q, k, v, {"batch", "heads", "S", "E"});
  if (!enable_gqa && k.dim(1) != q.dim(1)) {
    throw py::value_error("key has " + std::to_string(k.dim(1)) + " heads but query has " +
                          std::to_string(q.dim(1)) + "; they must agree unless enable_gqa=True");
  }
  AttentionParams& p = s.params;
  p.dtype = q.dtype;
  p.batch = q.dim(0), p.heads_q = q.dim(1), p.seqlen_q = q.dim(2), p.head_dim = q.dim(3);
  p.heads_kv = k.dim(1), p.seqlen_k = k.dim(2), p.head_dim_v = v.dim(3);
  p.q = q.data(), p.k = k.data(), p.v = v.data();
  p.q_strides = BatchStrides(q, true), p.k_strides = BatchStrides(k, true),
  p.v_strides = BatchStrides(v, true);
  p.scale = scale;
  p.dropout_p = dropout_p, p.dropout_seed = seed;
  if (is_causal) {
    p.seqlen_k = std::min(p.seqlen_q, p.seqlen_k);
    p.window_right = p.seqlen_q - p.seqlen_k;
  }
  if (!mask_in.is_none()) {
    const py::array mask = py::reinterpret_borrow<py::array>(mask_in);
    const bool is_bool = py::isinstance<py::array_t<bool>>(mask);
    if (!is_bool && !py::isinstance<py::array_t<float>>(mask)) {
      throw py::type_error("attn_mask must have dtype bool or float32, got " +
                           std::string(py::str(mask.dtype())));
    }
    const std::vector<std::int64_t> expected = {p.batch, p.heads_q, p.seqlen_q, k.dim(2)};
    const std::vector<std::int64_t> got(mask.shape(), mask.shape() + mask.ndim());
    if (got != expected) {
      throw py::value_error("attn_mask must be broadcast to (batch, heads, L, S) = " + ShapeString(expected) +
                            ", got " + ShapeString(got));
    }
    std::int64_t strides[4];
    for (int i = 0; i < 4; ++i) {
      if (mask.strides(i) % mask.itemsize() != 0) {
        throw py::value_error("attn_mask stride of dimension " + std::to_string(i) +
                              " is not a whole element");
      }
      strides[i] = mask.strides(i) / mask.itemsize();
    }
    p.mask = {is_bool ? MaskKind::kBool : MaskKind::kAdditive,
              mask.data(),
              strides[0],
              strides[1],
              strides[2],
              strides[3]};
    s.mask = mask;
  }
  return s;
}

py::tuple SdpaForward(const py::handle& query, const py::handle& key, const py::handle& value,
                      const py::handle& attn_mask, float dropout_p, bool is_causal,
                      std::optional<float> scale, bool enable_gqa, std::uint64_t seed, bool bf16) {
  Sdpa s = Prepare(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, seed, bf16);
  AttentionParams& p = s.params;
  const std::int64_t B = p.batch, H = p.heads_q, L = p.seqlen_q, Ev = p.value_head_dim();
  py::array out = NewArray(p.dtype, {B, H, L, Ev});
  py::array_t<float> lse({B, H, L});
  p.o = out.mutable_data(), p.lse = lse.mutable_data();
  p.o_strides = {H * L * Ev, Ev, L * Ev};
  EchoIfEnabled(p);
  {
    py::gil_scoped_release release;
    forward(p);
  }
  return py::make_tuple(out, lse);
}

py::tuple SdpaBackward(const py::handle& dout_in, const py::handle& query, const py::handle& key,
                       const py::handle& value, const py::handle& out_in, const py::handle& lse_in,
                       const py::handle& attn_mask, float dropout_p, bool is_causal,
                       std::optional<float> scale, bool enable_gqa, std::uint64_t seed, bool bf16) {
  Sdpa s = Prepare(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, seed, bf16);
  const Tensor out = AttentionTensor(out_in, "out", 4, "(batch, heads, L, Ev)", bf16);
  const Tensor dout = AttentionTensor(dout_in, "dout", 4, "(batch, heads, L, Ev)", bf16);
  for (const Tensor* t : {&out, &dout}) {
    CheckSameDType(s.query, *t);
    for (int i = 0; i < 3; ++i) CheckDim(*t, i, "size", s.query.dim(i), s.query);
    CheckDim(*t, 3, "Ev", s.value.dim(3), s.value);
  }
  const auto lse = ExactArray<float>(lse_in, "lse", 3);
  BackwardParams b;
  AttentionParams& p = b.attention;
  p = s.params;
  if (lse.shape(0) != p.batch || lse.shape(1) != p.heads_q || lse.shape(2) != p.seqlen_q) {
    throw py::value_error(
        "lse must have shape (batch, heads, L) = " + ShapeString({p.batch, p.heads_q, p.seqlen_q}) +
        ", got " + ShapeString({lse.shape(0), lse.shape(1), lse.shape(2)}));
  }
  p.o = const_cast<void*>(out.data()), p.o_strides = BatchStrides(out, true);
  p.lse = const_cast<float*>(lse.data());  // read only
  b.d_o = dout.data(), b.do_strides = BatchStrides(dout, true);
  // Zeros: keys beyond min(L, S) under causal are never attended and the pass does not reach them.
  py::array dq = NewZeros(p.dtype, s.query.shape), dk = NewZeros(p.dtype, s.key.shape);
  py::array dv = NewZeros(p.dtype, s.value.shape);
  const std::int64_t H = p.heads_q, Hkv = p.heads_kv, L = p.seqlen_q, S = s.key.dim(2), E = p.head_dim;
  const std::int64_t Ev = p.value_head_dim();
  b.dq = dq.mutable_data(), b.dk = dk.mutable_data(), b.dv = dv.mutable_data();
  b.dq_strides = {H * L * E, E, L * E}, b.dk_strides = {Hkv * S * E, E, S * E},
  b.dv_strides = {Hkv * S * Ev, Ev, S * Ev};
  EchoIfEnabled(b);
  {
    py::gil_scoped_release release;
    backward(b);
  }
  return py::make_tuple(dq, dk, dv);
}

}  // namespace

void RegisterSdpa(py::module_& m) {
  m.def("sdpa_forward", &SdpaForward, py::arg("query"), py::arg("key"), py::arg("value"), py::kw_only(),
        py::arg("attn_mask"), py::arg("dropout_p"), py::arg("is_causal"), py::arg("scale"),
        py::arg("enable_gqa"), py::arg("seed"), py::arg("bf16") = false,
        "scaled_dot_product_attention's computation: returns (out, lse).");
  m.def("sdpa_backward", &SdpaBackward, py::arg("dout"), py::arg("query"), py::arg("key"), py::arg("value"),
        py::arg("out"), py::arg("lse"), py::kw_only(), py::arg("attn_mask"), py::arg("dropout_p"),
        py::arg("is_causal"), py::arg("scale"), py::arg("enable_gqa"), py::arg("seed"),
        py::arg("bf16") = false,
        "The gradients (dquery, dkey, dvalue) of scaled_dot_product_attention.");
}

}  // namespace flashattn::python
