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

namespace {

[[noreturn]] void ShapeError(const std::string& name, const std::vector<std::int64_t>& expected,
                             const py::array& got) {
  std::vector<std::int64_t> shape(got.shape(), got.shape() + got.ndim());
  throw py::value_error(name + " must have shape " + ShapeString(expected) + ", got " + ShapeString(shape));
}

}  // namespace

void ApplySparsity(const Modifiers& m, AttentionParams* p) {
  if (!m.document_ids.is_none()) {
    const auto ids = ExactArray<std::int32_t>(m.document_ids, "document_ids", 2);
    if (ids.shape(0) != p->batch || ids.shape(1) != p->seqlen_k) {
      ShapeError("document_ids (batch, seqlen_k)", {p->batch, p->seqlen_k}, ids);
    }
    p->document_ids = ids.data();
  }
  ApplyBlockMask(m.block_mask, p->batch, p->seqlen_q, &p->block_mask);
}

void ApplyBlockMask(const py::object& block_mask, std::int64_t batch, std::int64_t seqlen_q, BlockMask* mask) {
  if (block_mask.is_none()) return;
  const auto lists = block_mask.cast<py::tuple>();
  BlockMask& b = *mask;
  b.block_size_q = lists[4].cast<std::int64_t>(), b.block_size_k = lists[5].cast<std::int64_t>();
  if (b.block_size_q < 1 || b.block_size_k < 1) {
    throw py::value_error("block_mask.block_size must be positive, got (" + std::to_string(b.block_size_q) + ", " +
                          std::to_string(b.block_size_k) + ")");
  }
  const std::int64_t query_blocks = (seqlen_q + b.block_size_q - 1) / b.block_size_q;
  const auto num = ExactArray<std::int32_t>(lists[0], "block_mask.kv_num_blocks", 3);
  const auto indices = ExactArray<std::int32_t>(lists[1], "block_mask.kv_indices", 4);
  b.heads = num.shape(1);
  const std::vector<std::int64_t> counts{batch, b.heads, query_blocks};
  if (num.shape(0) != batch || num.shape(2) != query_blocks) {
    ShapeError("block_mask.kv_num_blocks (batch, heads, ceil(seqlen_q / block_size_q))", counts, num);
  }
  if (indices.shape(0) != batch || indices.shape(1) != b.heads || indices.shape(2) != query_blocks) {
    ShapeError("block_mask.kv_indices (batch, heads, ceil(seqlen_q / block_size_q), kv_blocks)",
               {batch, b.heads, query_blocks, indices.shape(3)}, indices);
  }
  b.kv_num_blocks = num.data(), b.kv_indices = indices.data(), b.kv_width = indices.shape(3);
  if (lists[2].is_none()) return;
  const auto full_num = ExactArray<std::int32_t>(lists[2], "block_mask.full_kv_num_blocks", 3);
  const auto full_indices = ExactArray<std::int32_t>(lists[3], "block_mask.full_kv_indices", 4);
  if (full_num.shape(0) != batch || full_num.shape(1) != b.heads || full_num.shape(2) != query_blocks) {
    ShapeError("block_mask.full_kv_num_blocks (as kv_num_blocks)", counts, full_num);
  }
  if (full_indices.shape(0) != batch || full_indices.shape(1) != b.heads || full_indices.shape(2) != query_blocks) {
    ShapeError("block_mask.full_kv_indices (batch, heads, ceil(seqlen_q / block_size_q), kv_blocks)",
               {batch, b.heads, query_blocks, full_indices.shape(3)}, full_indices);
  }
  b.full_kv_num_blocks = full_num.data(), b.full_kv_indices = full_indices.data();
  b.full_kv_width = full_indices.shape(3);
}

// create_block_mask for one head: (kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices) as new
// int32 arrays (batch, 1, query blocks[, key blocks]).
py::tuple CreateBlockMask(std::int64_t batch, std::int64_t seqlen_q, std::int64_t seqlen_k, std::int64_t block_size_q,
                          std::int64_t block_size_k, bool causal, std::int64_t window_left, std::int64_t window_right,
                          const py::object& document_ids) {
  const std::int32_t* ids = nullptr;
  py::array_t<std::int32_t> ids_array;
  if (!document_ids.is_none()) {
    ids_array = ExactArray<std::int32_t>(document_ids, "document_ids", 2);
    if (ids_array.shape(0) != batch || ids_array.shape(1) != seqlen_k) {
      ShapeError("document_ids (batch, seqlen_k)", {batch, seqlen_k}, ids_array);
    }
    ids = ids_array.data();
  }
  BlockMaskLists m;
  {
    py::gil_scoped_release release;
    m = create_block_mask(batch, seqlen_q, seqlen_k, block_size_q, block_size_k, causal, window_left, window_right,
                          ids, 0);
  }
  const auto array = [](const std::vector<std::int32_t>& values, std::vector<std::int64_t> shape) {
    py::array_t<std::int32_t> out(shape);
    std::copy(values.begin(), values.end(), out.mutable_data());
    return out;
  };
  return py::make_tuple(array(m.kv_num_blocks, {batch, 1, m.query_blocks}),
                        array(m.kv_indices, {batch, 1, m.query_blocks, m.key_blocks}),
                        array(m.full_kv_num_blocks, {batch, 1, m.query_blocks}),
                        array(m.full_kv_indices, {batch, 1, m.query_blocks, m.key_blocks}));
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
      .def_readwrite("sinks", &Modifiers::sinks)
      .def_readwrite("block_mask", &Modifiers::block_mask)
      .def_readwrite("document_ids", &Modifiers::document_ids);
  m.def("create_block_mask", &CreateBlockMask, py::kw_only(), py::arg("batch"), py::arg("seqlen_q"), py::arg("seqlen_k"),
        py::arg("block_size_q"), py::arg("block_size_k"), py::arg("causal"), py::arg("window_left"),
        py::arg("window_right"), py::arg("document_ids"),
        "create_block_mask's lists for one head: (kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices).");
}

}  // namespace flashattn::python
