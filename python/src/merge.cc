// merge_attention_states: partial results over disjoint key sets, merged by their log-sum-exp. The Python
// layer stacks the partial outputs into one float32 (num_partials, batch, seqlen, heads, dv) array and the
// LSEs into (num_partials, batch, heads, seqlen), the library's layout.
#include <pybind11/numpy.h>

#include "arrays.h"
#include "bindings.h"
#include "echo.h"
#include "flashattn/merge.h"

namespace flashattn::python {
namespace {

py::tuple Merge(const py::handle& o_partials_in, const py::handle& lse_partials_in, const py::handle& like,
                bool bf16) {
  const auto o_partials = ExactArray<float>(o_partials_in, "outs", 5);
  const auto lse_partials = ExactArray<float>(lse_partials_in, "lses", 4);
  MergeParams p;
  p.dtype = ElementType(like, "outs", bf16);
  p.num_partials = o_partials.shape(0);
  p.batch = o_partials.shape(1), p.seqlen = o_partials.shape(2), p.heads = o_partials.shape(3);
  p.head_dim_v = o_partials.shape(4);
  const std::vector<std::int64_t> expected = {p.num_partials, p.batch, p.heads, p.seqlen};
  const std::vector<std::int64_t> got(lse_partials.shape(), lse_partials.shape() + 4);
  if (got != expected) {
    throw py::value_error(
        "lses must be num_partials softmax_lse arrays of shape (batch, heads, seqlen) matching "
        "outs: expected " +
        ShapeString(expected) + " stacked, got " + ShapeString(got));
  }
  p.o_partials = o_partials.data(), p.lse_partials = lse_partials.data();
  py::array out = NewArray(p.dtype, {p.batch, p.seqlen, p.heads, p.head_dim_v});
  py::array_t<float> lse({p.batch, p.heads, p.seqlen});
  p.o = out.mutable_data(), p.lse = lse.mutable_data();
  p.set_contiguous_strides();
  EchoIfEnabled(p);
  {
    py::gil_scoped_release release;
    merge_attention_states(p);
  }
  return py::make_tuple(out, lse);
}

}  // namespace

void RegisterMerge(py::module_& m) {
  m.def("merge", &Merge, py::arg("o_partials"), py::arg("lse_partials"), py::kw_only(), py::arg("like"),
        py::arg("bf16") = false, "merge_attention_states' computation: returns (out of like's dtype, lse).");
}

}  // namespace flashattn::python
