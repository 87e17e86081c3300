// lightning_indexer: DeepSeek-V3.2's lightning indexer over a contiguous or paged key cache of one head.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "arrays.h"
#include "bindings.h"
#include "echo.h"
#include "flashattn/indexer.h"
#include "kvcache.h"

namespace flashattn::python {

namespace {

// k_scale: float32 (batch or num_blocks, seqlen or page_block_size), one per key row, or the same with a last
// axis of 1.
void SetKeyScales(const py::object& k_scale, const Tensor& k, IndexerParams& p) {
  if (!py::isinstance<py::array_t<float>>(k_scale)) throw py::type_error("k_scale must be a float32 numpy.ndarray");
  const auto scales = py::reinterpret_borrow<py::array_t<float>>(k_scale);
  if (!(scales.ndim() == 2 || (scales.ndim() == 3 && scales.shape(2) == 1)) || scales.shape(0) != k.dim(0) ||
      scales.shape(1) != k.dim(1)) {
    throw py::value_error("k_scale must have shape (" + std::to_string(k.dim(0)) + ", " + std::to_string(k.dim(1)) +
                          "), one scale per key row of k_index");
  }
  p.k_scale = scales.data();
  p.scale_strides = {scales.strides(0) / 4, scales.strides(1) / 4, 0};
}

py::tuple LightningIndexer(const py::handle& q_in, const py::handle& k_in, const py::handle& weights_in,
                           std::int64_t top_k, const py::object& cache_seqlens, const py::object& block_table,
                           bool causal, const py::object& k_scale, const std::optional<std::string>& cache_dtype,
                           bool return_scores, bool bf16) {
  const bool paged = !block_table.is_none();
  const char* k_layout = paged ? "(num_blocks, page_block_size, 1, head_dim)" : "(batch, seqlen_k, 1, head_dim)";
  const Tensor q = AttentionTensor(q_in, "q_index", 4, "(batch, seqlen_q, heads, head_dim)", bf16);
  const CacheElement element = CacheElementOf(cache_dtype.value_or(""), k_in);
  const bool quantized = element != CacheElement::kFloat;
  const Tensor k = quantized ? ByteCacheTensor(k_in, "k_index", k_layout, element)
                             : AttentionTensor(k_in, "k_index", 4, k_layout, bf16);
  CheckDim(k, 2, "heads (one key head)", 1, k);
  CheckDim(k, 3, "head_dim", q.dim(3), q);
  const py::array_t<float> weights = ExactArray<float>(weights_in, "weights", 3);
  IndexerParams p;
  p.q = q.data(), p.dtype = q.dtype, p.q_strides = BatchStrides(q);
  p.batch = q.dim(0), p.seqlen_q = q.dim(1), p.heads = q.dim(2), p.head_dim = q.dim(3);
  if (weights.shape(0) != p.batch || weights.shape(1) != p.seqlen_q || weights.shape(2) != p.heads) {
    throw py::value_error("weights must have shape (batch, seqlen_q, heads) = (" + std::to_string(p.batch) + ", " +
                          std::to_string(p.seqlen_q) + ", " + std::to_string(p.heads) + "), got " +
                          ShapeString({weights.shape(0), weights.shape(1), weights.shape(2)}));
  }
  p.weights = weights.data();
  p.k_cache = k.data(), p.cache_element = element, p.cache_strides = BatchStrides(k);
  if (!quantized) p.cache_dtype = k.dtype;
  if (quantized) {
    if (k_scale.is_none()) throw py::value_error("k_scale is None but k_index is a quantized (" +
                                                 std::string(to_string(element)) + ") cache");
    SetKeyScales(k_scale, k, p);
  } else if (!k_scale.is_none()) {
    throw py::value_error("k_scale applies to a quantized k_index (int8, or cache_dtype='fp8_e4m3' or 'fp8_e5m2')");
  }
  std::optional<py::array_t<std::int32_t>> seqlens, table;
  if (!cache_seqlens.is_none()) {
    seqlens = ExactArray<std::int32_t>(cache_seqlens, "cache_seqlens", 1);
    if (seqlens->shape(0) != p.batch) {
      throw py::value_error("cache_seqlens must have shape (batch,) = (" + std::to_string(p.batch) + ",), got (" +
                            std::to_string(seqlens->shape(0)) + ",)");
    }
    p.cache_seqlens = seqlens->data();
  }
  if (paged) {
    table = ExactArray<std::int32_t>(block_table, "block_table", 2);
    if (table->shape(0) != p.batch) {
      throw py::value_error("block_table must have batch=" + std::to_string(p.batch) + " rows, got " +
                            std::to_string(table->shape(0)));
    }
    p.block_table = table->data(), p.max_pages = table->shape(1), p.block_table_stride = table->shape(1);
    p.num_pages = k.dim(0), p.page_size = k.dim(1);
  } else {
    p.cache_seqlen_max = k.dim(1);
    if (k.dim(0) != p.batch) {
      throw py::value_error("k_index must have batch=" + std::to_string(p.batch) + " (q_index's) in dimension 0, got " +
                            std::to_string(k.dim(0)));
    }
  }
  p.top_k = top_k, p.causal = causal;
  py::array_t<std::int32_t> indices({p.batch, p.seqlen_q, std::int64_t{1}, top_k > 0 ? top_k : 0});
  p.key_indices = indices.mutable_data();
  py::object scores = py::none();
  if (return_scores) {
    py::array_t<float> scores_array({p.batch, p.seqlen_q, std::int64_t{1}, top_k > 0 ? top_k : 0});
    p.scores = scores_array.mutable_data();
    scores = scores_array;
  }
  EchoIfEnabled(p);
  {
    py::gil_scoped_release release;
    lightning_indexer(p);
  }
  return py::make_tuple(indices, scores);
}

}  // namespace

void RegisterIndexer(py::module_& m) {
  m.def("lightning_indexer", &LightningIndexer, py::arg("q_index"), py::arg("k_index"), py::arg("weights"),
        py::kw_only(), py::arg("top_k"), py::arg("cache_seqlens"), py::arg("block_table"), py::arg("causal"),
        py::arg("k_scale"), py::arg("cache_dtype"), py::arg("return_scores"), py::arg("bf16") = false,
        "lightning_indexer's computation: returns (key_indices (batch, seqlen_q, 1, top_k) int32, scores or None).");
}

}  // namespace flashattn::python
