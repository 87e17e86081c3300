// Ring attention on NumPy shards: RingForward and RingBackward are prepared calls (see distributed.h). The
// constructor checks this rank's arrays and allocates the outputs; run() calls ring_forward or
// ring_backward, whose own collective check comes before any transfer, and returns the new arrays.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "arrays.h"
#include "distributed.h"
#include "flashattn/distributed.h"
#include "modifiers.h"

namespace flashattn::python {
namespace {

namespace fd = flashattn::distributed;

// The keywords both ring calls share, as the kernels' Modifiers (the seed is set by run()).
Modifiers RingModifiers(float dropout_p, std::optional<float> softmax_scale, bool causal, std::int64_t window_left,
                        std::int64_t window_right, float softcap, const py::object& alibi_slopes,
                        const py::object& sinks) {
  Modifiers m;
  m.dropout_p = dropout_p, m.softmax_scale = softmax_scale, m.causal = causal;
  m.window_left = window_left, m.window_right = window_right, m.softcap = softcap;
  m.alibi_slopes = alibi_slopes;
  m.sinks = sinks;
  return m;
}

// This rank's q, k, v shards: (batch, L, Hq, d), (batch, L, Hkv, d), (batch, L, Hkv, dv), one element type,
// their shapes checked against each other by flashattn/distributed/__init__.py and by the library.
struct Shards {
  Tensor q, k, v;

  Shards(const py::handle& q_in, const py::handle& k_in, const py::handle& v_in)
      : q(AttentionTensor(q_in, "q", 4, "(batch, seqlen_local, heads_q, head_dim)", false)),
        k(AttentionTensor(k_in, "k", 4, "(batch, seqlen_local, heads_kv, head_dim)", false)),
        v(AttentionTensor(v_in, "v", 4, "(batch, seqlen_local, heads_kv, head_dim_v)", false)) {
    CheckSameDType(q, k);
    CheckSameDType(q, v);
  }

  // The local AttentionParams without o and lse; `m` (which owns the slopes) must outlive them.
  AttentionParams Params(const Modifiers& m) const {
    AttentionParams p = AttentionInputs(q, k, v);
    ApplyModifiers(m, p.batch, &p);
    return p;
  }
};

Strides ContiguousStrides(const std::vector<std::int64_t>& shape) {
  return {shape[1] * shape[2] * shape[3], shape[2] * shape[3], shape[3]};
}

class RingForward {
 public:
  RingForward(const py::handle& comm, const py::handle& q, const py::handle& k, const py::handle& v,
              const std::string& layout, float dropout_p, std::optional<float> softmax_scale, bool causal,
              std::int64_t window_left, std::int64_t window_right, float softcap, const py::object& alibi_slopes,
              const py::object& sinks)
      : comm_(CommFromPython(comm)),
        shards_(q, k, v),
        modifiers_(RingModifiers(dropout_p, softmax_scale, causal, window_left, window_right, softcap,
                                 alibi_slopes, sinks)) {
    params_.layout = fd::parse_layout(layout);
    params_.local = shards_.Params(modifiers_);
    AttentionParams& p = params_.local;
    const std::vector<std::int64_t> out_shape = {p.batch, p.seqlen_q, p.heads_q, p.value_head_dim()};
    out_ = NewArray(p.dtype, out_shape);
    lse_ = py::array_t<float>({p.batch, p.heads_q, p.seqlen_q});
    p.o = out_.mutable_data(), p.o_strides = ContiguousStrides(out_shape);
    p.lse = lse_.mutable_data();
  }

  // (out, softmax_lse) of the whole sequence's seqlen rows, this rank's share of them.
  py::tuple Run(std::int64_t seqlen, std::uint64_t seed, double timeout_seconds) {
    params_.seqlen = seqlen, params_.timeout_seconds = timeout_seconds;
    params_.local.dropout_seed = seed;
    {
      py::gil_scoped_release release;
      fd::ring_forward(params_, comm_);
    }
    return py::make_tuple(out_, lse_);
  }

 private:
  MPI_Comm comm_;
  Shards shards_;
  Modifiers modifiers_;
  fd::RingParams params_;
  py::array out_;
  py::array_t<float> lse_;
};

class RingBackward {
 public:
  RingBackward(const py::handle& comm, const py::handle& dout, const py::handle& q, const py::handle& k,
               const py::handle& v, const py::handle& out, const py::handle& lse, const std::string& layout,
               float dropout_p, std::optional<float> softmax_scale, bool causal, std::int64_t window_left,
               std::int64_t window_right, float softcap, const py::object& alibi_slopes, const py::object& sinks)
      : comm_(CommFromPython(comm)),
        shards_(q, k, v),
        out_(AttentionTensor(out, "out", 4, "(batch, seqlen_local, heads_q, head_dim_v)", false)),
        dout_(AttentionTensor(dout, "dout", 4, "(batch, seqlen_local, heads_q, head_dim_v)", false)),
        lse_(ExactArray<float>(lse, "softmax_lse", 3)),
        modifiers_(RingModifiers(dropout_p, softmax_scale, causal, window_left, window_right, softcap,
                                 alibi_slopes, sinks)),
        dsinks_(NewSinkGradient(modifiers_, shards_.q.shape[2])) {
    CheckSameDType(shards_.q, out_);
    CheckSameDType(shards_.q, dout_);
    params_.layout = fd::parse_layout(layout);
    BackwardParams& b = params_.local;
    AttentionParams& p = b.attention;
    p = shards_.Params(modifiers_);
    p.o = const_cast<void*>(out_.data()), p.o_strides = BatchStrides(out_);
    p.lse = const_cast<float*>(lse_.data());  // read only: the backward pass never writes o or lse
    b.d_o = dout_.data(), b.do_strides = BatchStrides(dout_);
    dq_ = NewArray(p.dtype, shards_.q.shape), dk_ = NewArray(p.dtype, shards_.k.shape);
    dv_ = NewArray(p.dtype, shards_.v.shape);
    b.dq = dq_.mutable_data(), b.dk = dk_.mutable_data(), b.dv = dv_.mutable_data();
    b.dq_strides = ContiguousStrides(shards_.q.shape), b.dk_strides = ContiguousStrides(shards_.k.shape);
    b.dv_strides = ContiguousStrides(shards_.v.shape);
    if (dsinks_) b.dsinks = dsinks_->mutable_data();
  }

  // (dq, dk, dv) of this rank's shards, and with sinks this rank's share of dsinks.
  py::tuple Run(std::int64_t seqlen, std::uint64_t seed, double timeout_seconds) {
    params_.seqlen = seqlen, params_.timeout_seconds = timeout_seconds;
    params_.local.attention.dropout_seed = seed;
    {
      py::gil_scoped_release release;
      fd::ring_backward(params_, comm_);
    }
    return Gradients(dq_, dk_, dv_, dsinks_);
  }

 private:
  MPI_Comm comm_;
  Shards shards_;
  Tensor out_, dout_;
  py::array_t<float> lse_;
  Modifiers modifiers_;
  std::optional<py::array_t<float>> dsinks_;
  fd::RingBackwardParams params_;
  py::array dq_, dk_, dv_;
};

}  // namespace

void RegisterRing(py::module_& m) {
  py::class_<RingForward>(m, "RingForward", "This rank's part of a ring forward call, checked locally.")
      .def(py::init<const py::handle&, const py::handle&, const py::handle&, const py::handle&,
                    const std::string&, float, std::optional<float>, bool, std::int64_t, std::int64_t, float,
                    const py::object&, const py::object&>(),
           py::arg("comm"), py::arg("q"), py::arg("k"), py::arg("v"), py::kw_only(), py::arg("layout"),
           py::arg("dropout_p"), py::arg("softmax_scale"), py::arg("causal"), py::arg("window_left"),
           py::arg("window_right"), py::arg("softcap"), py::arg("alibi_slopes"), py::arg("sinks"))
      .def("run", &RingForward::Run, py::kw_only(), py::arg("seqlen"), py::arg("seed"),
           py::arg("timeout_seconds"), "The collective call: returns (out, softmax_lse).");
  py::class_<RingBackward>(m, "RingBackward", "This rank's part of a ring backward call, checked locally.")
      .def(py::init<const py::handle&, const py::handle&, const py::handle&, const py::handle&,
                    const py::handle&, const py::handle&, const py::handle&, const std::string&, float,
                    std::optional<float>, bool, std::int64_t, std::int64_t, float, const py::object&,
                    const py::object&>(),
           py::arg("comm"), py::arg("dout"), py::arg("q"), py::arg("k"), py::arg("v"), py::arg("out"),
           py::arg("softmax_lse"), py::kw_only(), py::arg("layout"), py::arg("dropout_p"),
           py::arg("softmax_scale"), py::arg("causal"), py::arg("window_left"), py::arg("window_right"),
           py::arg("softcap"), py::arg("alibi_slopes"), py::arg("sinks"))
      .def("run", &RingBackward::Run, py::kw_only(), py::arg("seqlen"), py::arg("seed"),
           py::arg("timeout_seconds"), "The collective call: returns (dq, dk, dv), or (dq, dk, dv, dsinks' share).");
}

}  // namespace flashattn::python
