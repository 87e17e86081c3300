#include "modifiers.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <string>
#include <vector>

#include "arrays.h"

namespace flashattn::python {

void ApplyModifiers(const Modifiers& m, std::int64_t batch, AttentionSettings* p) {
  p->dropout_p = m.dropout_p;
  p->dropout_seed = m.seed;
  p->scale = m.softmax_scale;
  p->causal = m.causal;
  p->window_left = m.window_left;
  p->window_right = m.window_right;
  p->softcap = m.softcap;
  ApplySinks(m.sinks, p->heads_q, p);
  if (m.alibi_slopes.is_none()) return;
  const auto slopes =
      ExactArray<float>(m.alibi_slopes, "alibi_slopes", m.alibi_slopes.attr("ndim").cast<int>());
  const bool per_batch = slopes.ndim() == 2;
  const bool fits = (slopes.ndim() == 1 && slopes.shape(0) == p->heads_q) ||
                    (per_batch && slopes.shape(0) == batch && slopes.shape(1) == p->heads_q);
  if (!fits) {
    std::vector<std::int64_t> shape(slopes.shape(), slopes.shape() + slopes.ndim());
    throw py::value_error("alibi_slopes must have shape (heads_q,) = (" + std::to_string(p->heads_q) +
                          ",) or (batch, heads_q) = (" + std::to_string(batch) + ", " +
                          std::to_string(p->heads_q) + "), got " + ShapeString(shape));
  }
  p->alibi_slopes = slopes.data();
  p->alibi_batch_stride = per_batch ? p->heads_q : 0;
}

void ApplyBlockPosition(const BlockPositionArgument& at, AttentionSettings* p) {
  if (at) p->block_position = {(*at)[0], (*at)[1], (*at)[2], (*at)[3]};
}

void ApplySinks(const py::object& sinks, std::int64_t heads_q, ScoreSettings* p) {
  if (sinks.is_none()) return;
  const auto array = ExactArray<float>(sinks, "sinks", 1);
  if (array.shape(0) != heads_q) {
    throw py::value_error("sinks must have shape (heads_q,) = (" + std::to_string(heads_q) + ",), got (" +
                          std::to_string(array.shape(0)) + ",)");
  }
  p->sinks = array.data();
}

KeySelection SelectedKeysOf(const py::object& key_indices, const std::vector<std::int64_t>& leading,
                            std::int64_t heads_kv, const char* layout) {
  if (key_indices.is_none()) return {};
  const int ndim = static_cast<int>(leading.size()) + 2;
  const auto array = ExactArray<std::int32_t>(key_indices, "key_indices", ndim);
  std::vector<std::int64_t> shape(array.shape(), array.shape() + array.ndim()), expected = leading;
  expected.push_back(heads_kv);
  if (!std::equal(expected.begin(), expected.end(), shape.begin())) {
    expected.push_back(shape.back());
    throw py::value_error(std::string("key_indices must have shape ") + layout + " = " + ShapeString(expected) +
                          ", got " + ShapeString(shape));
  }
  return {array.data(), shape.back()};
}

std::optional<py::array_t<float>> NewSinkGradient(const Modifiers& m, std::int64_t heads_q) {
  if (m.sinks.is_none()) return std::nullopt;
  return py::array_t<float>(heads_q);
}

py::tuple Gradients(const py::array& dq, const py::array& dk, const py::array& dv,
                    const std::optional<py::array_t<float>>& dsinks) {
  return dsinks ? py::make_tuple(dq, dk, dv, *dsinks) : py::make_tuple(dq, dk, dv);
}

void RegisterModifiers(py::module_& m) {
  py::class_<Modifiers>(m, "Modifiers", "Keyword arguments shared by the forward and backward functions.")
      .def(py::init<>())
      .def_readwrite("dropout_p", &Modifiers::dropout_p)
      .def_readwrite("softmax_scale", &Modifiers::softmax_scale)
      .def_readwrite("causal", &Modifiers::causal)
      .def_readwrite("window_left", &Modifiers::window_left)
      .def_readwrite("window_right", &Modifiers::window_right)
      .def_readwrite("softcap", &Modifiers::softcap)
      .def_readwrite("alibi_slopes", &Modifiers::alibi_slopes)
      .def_readwrite("seed", &Modifiers::seed)
      .def_readwrite("sinks", &Modifiers::sinks);
}

}  // namespace flashattn::python
