// flash_attn_with_kvcache: q attends to a contiguous or paged key/value cache, after k and v (if given) are
// rotated and written into the cache in place at cache_seqlens. Every check, the library's included, runs
// before the cache is written: a call that raises leaves k_cache and v_cache unchanged.
#include "kvcache.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "arrays.h"
#include "bindings.h"
#include "flashattn/decode.h"
#include "modifiers.h"

namespace flashattn::python {

KvcacheCall PrepareKvcache(const py::handle& q_in, const py::handle& k_cache_in, const py::handle& v_cache_in,
                           const py::handle& k_in, const py::handle& v_in, const py::handle& rotary_cos_in,
                           const py::handle& rotary_sin_in, const py::handle& cache_seqlens_in,
                           const py::handle& block_table_in, const py::handle& alibi_slopes,
                           std::optional<float> softmax_scale, bool causal, std::int64_t window_left,
                           std::int64_t window_right, float softcap, bool rotary_interleaved,
                           std::int64_t num_splits, bool return_lse, bool bf16, const py::handle& sinks,
                           std::optional<std::int64_t> head_dim_v) {
  const bool paged = !block_table_in.is_none();
  const bool values_in_keys = v_cache_in.is_none();
  if (head_dim_v && !values_in_keys) {
    throw py::value_error("head_dim_v applies when v_cache is None (V read as the first head_dim_v features of "
                          "k_cache); a v_cache of its own has the head dim of k_cache");
  }
  const char* cache_layout = paged ? "(num_blocks, page_block_size, heads_kv, head_dim)"
                                   : "(batch, seqlen_cache, heads_kv, head_dim)";
  const Tensor q = AttentionTensor(q_in, "q", 4, "(batch, seqlen_q, heads_q, head_dim)", bf16);
  const Tensor k_cache = AttentionTensor(k_cache_in, "k_cache", 4, cache_layout, bf16);
  const Tensor v_cache = values_in_keys ? k_cache : AttentionTensor(v_cache_in, "v_cache", 4, cache_layout, bf16);
  CheckSameDType(q, k_cache);
  CheckSameDType(q, v_cache);
  CheckDim(k_cache, 3, "head_dim", q.dim(3), q);
  for (int i = 0; i < 4; ++i) CheckDim(v_cache, i, i == 3 ? "head_dim" : "size", k_cache.dim(i), k_cache);
  if (v_cache.strides != k_cache.strides) {
    throw py::value_error(
        "v_cache must have the strides of k_cache (the library addresses both with one set), got " +
        ShapeString(v_cache.strides) + " and " + ShapeString(k_cache.strides) + " elements");
  }
  if (!paged) CheckDim(k_cache, 0, "batch", q.dim(0), q);

  DecodeParams p;
  p.dtype = p.cache_dtype = q.dtype;
  p.batch = q.dim(0), p.seqlen_q = q.dim(1), p.heads_q = q.dim(2), p.head_dim = q.dim(3);
  p.heads_kv = k_cache.dim(2);
  if (values_in_keys) p.head_dim_v = head_dim_v.value_or(p.head_dim);
  const std::int64_t dv = p.value_head_dim();
  p.q = q.data(), p.q_strides = BatchStrides(q);
  p.k_cache = const_cast<void*>(k_cache.data()), p.v_cache = const_cast<void*>(v_cache.data());
  p.cache_strides = BatchStrides(k_cache);

  std::optional<Tensor> k, v;
  if (values_in_keys && !v_in.is_none()) {
    throw py::value_error("v must be None when v_cache is None: V is read inside k_cache, whose appended rows "
                          "are k's");
  }
  if (!values_in_keys && k_in.is_none() != v_in.is_none())
    throw py::value_error("k and v must be given together (or both be None)");
  if (values_in_keys && !k_in.is_none()) {
    k = AttentionTensor(k_in, "k", 4, "(batch, seqlen_new, heads_kv, head_dim)", bf16);
    CheckSameDType(q, *k);
    CheckDim(*k, 0, "batch", q.dim(0), q);
    CheckDim(*k, 2, "heads_kv", k_cache.dim(2), k_cache);
    CheckDim(*k, 3, "head_dim", q.dim(3), q);
    if (!k_cache.array.writeable()) throw py::value_error(k_cache.name + " is read-only but k is appended to it");
    p.seqlen_new = k->dim(1);
    p.k_new = k->data(), p.new_strides = BatchStrides(*k);
  } else if (!k_in.is_none()) {
    k = AttentionTensor(k_in, "k", 4, "(batch, seqlen_new, heads_kv, head_dim)", bf16);
    v = AttentionTensor(v_in, "v", 4, "(batch, seqlen_new, heads_kv, head_dim)", bf16);
    CheckSameDType(q, *k);
    CheckSameDType(q, *v);
    CheckDim(*k, 0, "batch", q.dim(0), q);
    CheckDim(*k, 2, "heads_kv", k_cache.dim(2), k_cache);
    CheckDim(*k, 3, "head_dim", q.dim(3), q);
    for (int i = 0; i < 4; ++i) CheckDim(*v, i, "size", k->dim(i), *k);
    if (v->strides != k->strides) {
      throw py::value_error("v must have the strides of k, got " + ShapeString(v->strides) + " and " +
                            ShapeString(k->strides) + " elements; pass contiguous arrays");
    }
    for (const Tensor* cache : {&k_cache, &v_cache}) {
      if (!cache->array.writeable())
        throw py::value_error(cache->name + " is read-only but k and v are appended to it");
    }
    p.seqlen_new = k->dim(1);
    p.k_new = k->data(), p.v_new = v->data(), p.new_strides = BatchStrides(*k);
  }

  const auto cache_seqlens = ExactArray<std::int32_t>(cache_seqlens_in, "cache_seqlens", 1);
  if (cache_seqlens.shape(0) != p.batch) {
    throw py::value_error("cache_seqlens must have shape (batch,) = (" + std::to_string(p.batch) +
                          ",), got (" + std::to_string(cache_seqlens.shape(0)) + ",)");
  }
  p.cache_seqlens = cache_seqlens.data();
  std::optional<py::array_t<std::int32_t>> block_table;
  if (paged) {
    block_table = ExactArray<std::int32_t>(block_table_in, "block_table", 2);
    if (block_table->shape(0) != p.batch) {
      throw py::value_error("block_table must have batch = " + std::to_string(p.batch) + " rows, got " +
                            std::to_string(block_table->shape(0)));
    }
    p.block_table = block_table->data();
    p.max_pages = block_table->shape(1), p.block_table_stride = p.max_pages;
    p.num_pages = k_cache.dim(0), p.page_size = k_cache.dim(1);
  } else {
    p.cache_seqlen_max = k_cache.dim(1);
  }

  std::optional<py::array_t<float>> cos, sin;
  if (rotary_cos_in.is_none() != rotary_sin_in.is_none()) {
    throw py::value_error("rotary_cos and rotary_sin must be given together (or both be None)");
  }
  if (!rotary_cos_in.is_none()) {
    cos = ExactArray<float>(rotary_cos_in, "rotary_cos", 2);
    sin = ExactArray<float>(rotary_sin_in, "rotary_sin", 2);
    if (sin->shape(0) != cos->shape(0) || sin->shape(1) != cos->shape(1)) {
      throw py::value_error("rotary_sin must have the shape of rotary_cos " +
                            ShapeString({cos->shape(0), cos->shape(1)}) + ", got " +
                            ShapeString({sin->shape(0), sin->shape(1)}));
    }
    p.rotary_cos = cos->data(), p.rotary_sin = sin->data();
    p.rotary_max_pos = cos->shape(0), p.rotary_dim = 2 * cos->shape(1);
    p.rotary_interleaved = rotary_interleaved;
  }

  // The slopes through ApplyModifiers, which checks them against (batch, heads_q).
  Modifiers m;
  m.alibi_slopes = py::reinterpret_borrow<py::object>(alibi_slopes);
  AttentionSettings shape;
  shape.heads_q = p.heads_q;
  ApplyModifiers(m, p.batch, &shape);
  p.alibi_slopes = shape.alibi_slopes, p.alibi_batch_stride = shape.alibi_batch_stride;
  p.scale = softmax_scale, p.causal = causal, p.window_left = window_left, p.window_right = window_right;
  p.softcap = softcap, p.num_splits = num_splits;
  ApplySinks(py::reinterpret_borrow<py::object>(sinks), p.heads_q, &p);

  py::array out = NewArray(p.dtype, {p.batch, p.seqlen_q, p.heads_q, dv});
  p.o = out.mutable_data();
  p.o_strides = {p.seqlen_q * p.heads_q * dv, p.heads_q * dv, dv};
  py::object lse = py::none();
  if (return_lse) {
    py::array_t<float> lse_array({p.batch, p.heads_q, p.seqlen_q});
    p.lse = lse_array.mutable_data();
    lse = lse_array;
  }
  KvcacheCall call{p, {}, out, lse};
  for (const py::handle& array : {q_in, k_cache_in, v_cache_in, k_in, v_in, rotary_cos_in, rotary_sin_in,
                                  cache_seqlens_in, block_table_in, alibi_slopes, sinks}) {
    call.held.push_back(py::reinterpret_borrow<py::object>(array));
  }
  return call;
}

namespace {

py::tuple Kvcache(const py::handle& q, const py::handle& k_cache, const py::handle& v_cache, const py::handle& k,
                  const py::handle& v, const py::handle& rotary_cos, const py::handle& rotary_sin,
                  const py::handle& cache_seqlens, const py::handle& block_table, const py::handle& alibi_slopes,
                  std::optional<float> softmax_scale, bool causal, std::int64_t window_left,
                  std::int64_t window_right, float softcap, bool rotary_interleaved, std::int64_t num_splits,
                  bool return_lse, bool bf16, const py::handle& sinks, std::optional<std::int64_t> head_dim_v) {
  KvcacheCall call = PrepareKvcache(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens,
                                    block_table, alibi_slopes, softmax_scale, causal, window_left, window_right,
                                    softcap, rotary_interleaved, num_splits, return_lse, bf16, sinks, head_dim_v);
  {
    py::gil_scoped_release release;
    decode(call.params);
  }
  return py::make_tuple(call.out, call.lse);
}

}  // namespace

void RegisterKvcache(py::module_& m) {
  m.def("kvcache", &Kvcache, py::arg("q"), py::arg("k_cache"), py::arg("v_cache"), py::kw_only(),
        py::arg("k"), py::arg("v"), py::arg("rotary_cos"), py::arg("rotary_sin"), py::arg("cache_seqlens"),
        py::arg("block_table"), py::arg("alibi_slopes"), py::arg("softmax_scale"), py::arg("causal"),
        py::arg("window_left"), py::arg("window_right"), py::arg("softcap"), py::arg("rotary_interleaved"),
        py::arg("num_splits"), py::arg("return_lse"), py::arg("bf16") = false, py::arg("sinks") = py::none(),
        py::arg("head_dim_v") = py::none(),
        "flash_attn_with_kvcache's computation: returns (out, softmax_lse or None); appends k, v in place. "
        "v_cache None: V is the first head_dim_v features of k_cache.");
}

}  // namespace flashattn::python
