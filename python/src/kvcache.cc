// flash_attn_with_kvcache: q attends to a contiguous or paged key/value cache, after k and v (if given) are
// rotated and written into the cache in place at cache_seqlens. Every check, the library's included, runs
// before the cache is written: a call that raises leaves k_cache and v_cache unchanged. The cache may be
// quantized (int8, or FP8 E4M3 or E5M2 bytes) with float32 scales (docs/quantized_cache.md); quantize_kv fills one.
#include "kvcache.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "arrays.h"
#include "bindings.h"
#include "echo.h"
#include "flashattn/decode.h"
#include "modifiers.h"

namespace flashattn::python {

namespace {

std::string TypeName(const py::handle& object) { return std::string(py::str(object.get_type().attr("__name__"))); }

// The quantized element type to_string names `name` ("int8", "fp8_e4m3", "fp8_e5m2"), or none.
std::optional<CacheElement> QuantizedElementNamed(const std::string& name) {
  for (const CacheElement element : {CacheElement::kInt8, CacheElement::kFp8E4M3, CacheElement::kFp8E5M2}) {
    if (name == to_string(element)) return element;
  }
  return std::nullopt;
}

}  // namespace

// The cache's element type: cache_dtype "int8", "fp8_e4m3" or "fp8_e5m2", or, when it is empty, int8 for an
// int8 k_cache and a float cache otherwise (a uint8 k_cache is an FP8 cache that lacks its cache_dtype).
CacheElement CacheElementOf(const std::string& cache_dtype, const py::handle& k_cache) {
  if (const std::optional<CacheElement> element = QuantizedElementNamed(cache_dtype)) return *element;
  if (!cache_dtype.empty()) {
    throw py::value_error("cache_dtype must be None, 'int8', 'fp8_e4m3' or 'fp8_e5m2', got '" + cache_dtype + "'");
  }
  const auto has_dtype = [&](const char* dtype) {
    return py::isinstance<py::array>(k_cache) &&
           py::reinterpret_borrow<py::array>(k_cache).dtype().equal(py::dtype(dtype));
  };
  if (has_dtype("uint8")) {
    throw py::type_error(
        "k_cache has dtype uint8, which holds an FP8 cache only with cache_dtype='fp8_e4m3' or 'fp8_e5m2'");
  }
  return has_dtype("int8") ? CacheElement::kInt8 : CacheElement::kFloat;
}

// A quantized cache: a 4-dimensional ndarray of int8 (or uint8 holding FP8 bytes) whose last dimension is
// contiguous; one byte per element, so its byte strides are its element strides.
Tensor ByteCacheTensor(const py::handle& object, const std::string& name, const char* layout, CacheElement element) {
  if (!py::isinstance<py::array>(object)) throw py::type_error(name + " must be a numpy.ndarray, got " + TypeName(object));
  const char* numpy_dtype = element == CacheElement::kInt8 ? "int8" : "uint8";
  Tensor t;
  t.name = name;
  t.array = py::reinterpret_borrow<py::array>(object);
  if (!t.array.dtype().equal(py::dtype(numpy_dtype))) {
    throw py::type_error(name + " must have dtype " + numpy_dtype + " for an " + std::string(to_string(element)) +
                         " cache (K and V share one element type), got " + std::string(py::str(t.array.dtype())));
  }
  if (t.array.ndim() != 4) {
    throw py::value_error(name + " must have 4 dimensions " + layout + ", got " + std::to_string(t.array.ndim()));
  }
  for (int i = 0; i < 4; ++i) t.shape.push_back(t.array.shape(i)), t.strides.push_back(t.array.strides(i));
  if (t.shape.back() > 1 && t.strides.back() != 1) {
    throw py::value_error(name + " must have a contiguous last dimension (stride 1), got stride " +
                          std::to_string(t.strides.back()) + "; pass numpy.ascontiguousarray(" + name + ")");
  }
  return t;
}

namespace {

// k_scale or v_scale of a quantized cache, float32: () one per tensor, (Hkv,) one per K/V head, (outer, rows,
// Hkv) one per token, (outer, rows, Hkv, d / g) one per group of g features of each token.
struct Scales {
  py::array array;
  ScaleGranularity granularity = ScaleGranularity::kPerToken;
  std::int64_t group_size = 0;
  Strides strides;  // per token, in floats
  std::vector<std::int64_t> shape, byte_strides;
};

Scales ScalesOf(const py::handle& object, const std::string& name, const Tensor& cache) {
  if (object.is_none()) throw py::value_error(name + " is required with a quantized cache");
  if (!py::isinstance<py::array>(object)) throw py::type_error(name + " must be a numpy.ndarray, got " + TypeName(object));
  Scales s;
  s.array = py::reinterpret_borrow<py::array>(object);
  if (!s.array.dtype().equal(py::dtype("float32"))) {
    throw py::type_error(name + " must have dtype float32, got " + std::string(py::str(s.array.dtype())));
  }
  const std::int64_t heads_kv = cache.dim(2), d = cache.dim(3);
  for (int i = 0; i < s.array.ndim(); ++i) s.shape.push_back(s.array.shape(i)), s.byte_strides.push_back(s.array.strides(i));
  const auto fail_shape = [&] {
    throw py::value_error(name + " must have shape () (per tensor), (" + std::to_string(heads_kv) +
                          ",) (per K/V head), " + ShapeString({cache.dim(0), cache.dim(1), heads_kv}) +
                          " (per token) or " + ShapeString({cache.dim(0), cache.dim(1), heads_kv, -1}) +
                          " with a last axis of head_dim / group_size (per group), got " + ShapeString(s.shape));
  };
  for (std::int64_t bytes : s.byte_strides) {
    if (bytes % 4 != 0 || bytes < 0) {
      throw py::value_error(name + " strides must be non-negative multiples of 4 bytes, got " + ShapeString(s.byte_strides));
    }
  }
  switch (s.array.ndim()) {
    case 0: s.granularity = ScaleGranularity::kPerTensor; return s;
    case 1:
      if (s.shape[0] != heads_kv) fail_shape();
      if (s.shape[0] > 1 && s.byte_strides[0] != 4) throw py::value_error(name + " must be contiguous");
      s.granularity = ScaleGranularity::kPerHead;
      return s;
    case 3:
    case 4:
      if (s.shape[0] != cache.dim(0) || s.shape[1] != cache.dim(1) || s.shape[2] != heads_kv) fail_shape();
      if (s.array.ndim() == 4) {
        const std::int64_t groups = s.shape[3];
        if (groups < 1 || d % groups != 0) {
          throw py::value_error(name + " has " + std::to_string(groups) + " groups per row, which must divide head_dim=" +
                                std::to_string(d));
        }
        if (groups > 1 && s.byte_strides[3] != 4) throw py::value_error(name + " must have a contiguous last dimension");
        s.group_size = groups > 1 ? d / groups : 0;
      }
      s.strides = {s.byte_strides[0] / 4, s.byte_strides[1] / 4, s.byte_strides[2] / 4};
      return s;
    default:
      fail_shape();
  }
  return s;
}

// Packed new keys k (1, total_q, heads_kv, head_dim), like q: each sequence appends its own query rows' keys,
// which decode() asks for as seqlen_new = seqlen_q (max_seqlen_q).
void PackAppend(const Tensor& k, const Tensor& q, DecodeParams* p) {
  CheckDim(k, 1, "total_q", q.dim(1), q);
  p->seqlen_new = p->seqlen_q;
  p->new_strides.batch = 0;
}

}  // namespace

KvcacheCall PrepareKvcache(const py::handle& q_in, const py::handle& k_cache_in, const py::handle& v_cache_in,
                           const py::handle& k_in, const py::handle& v_in, const py::handle& rotary_cos_in,
                           const py::handle& rotary_sin_in, const py::handle& cache_seqlens_in,
                           const py::handle& block_table_in, const py::handle& alibi_slopes,
                           std::optional<float> softmax_scale, bool causal, std::int64_t window_left,
                           std::int64_t window_right, float softcap, bool rotary_interleaved,
                           std::int64_t num_splits, bool return_lse, bool bf16, const py::handle& sinks,
                           std::optional<std::int64_t> head_dim_v, const KvcacheQuantization& quantization,
                           const KvcachePacking& packing) {
  const bool paged = !block_table_in.is_none();
  const bool packed = !packing.cu_seqlens_q.is_none();
  const bool values_in_keys = v_cache_in.is_none();
  if (head_dim_v && !values_in_keys) {
    throw py::value_error("head_dim_v applies when v_cache is None (V read as the first head_dim_v features of "
                          "k_cache); a v_cache of its own has the head dim of k_cache");
  }
  const char* cache_layout = paged ? "(num_blocks, page_block_size, heads_kv, head_dim)"
                                   : "(batch, seqlen_cache, heads_kv, head_dim)";
  const Tensor q = AttentionTensor(q_in, "q", 4, "(batch, seqlen_q, heads_q, head_dim)", bf16);
  const CacheElement element = CacheElementOf(quantization.cache_dtype, k_cache_in);
  const bool quantized = element != CacheElement::kFloat;
  // A float cache of any float type: q and o keep their own.
  const auto cache_tensor = [&](const py::handle& object, const char* name) {
    return quantized ? ByteCacheTensor(object, name, cache_layout, element)
                     : AttentionTensor(object, name, 4, cache_layout, bf16);
  };
  const Tensor k_cache = cache_tensor(k_cache_in, "k_cache");
  const Tensor v_cache = values_in_keys ? k_cache : cache_tensor(v_cache_in, "v_cache");
  if (!quantized) CheckSameDType(k_cache, v_cache);
  CheckDim(k_cache, 3, "head_dim", q.dim(3), q);
  for (int i = 0; i < 4; ++i) CheckDim(v_cache, i, i == 3 ? "head_dim" : "size", k_cache.dim(i), k_cache);
  if (v_cache.strides != k_cache.strides) {
    throw py::value_error(
        "v_cache must have the strides of k_cache (the library addresses both with one set), got " +
        ShapeString(v_cache.strides) + " and " + ShapeString(k_cache.strides) + " elements");
  }
  std::optional<py::array_t<std::int32_t>> cu_seqlens_q;
  if (packed) {
    cu_seqlens_q = ExactArray<std::int32_t>(packing.cu_seqlens_q, "cu_seqlens_q", 1);
    if (q.dim(0) != 1) throw py::value_error("packed queries come as (1, total_q, heads_q, head_dim)");
    if (cu_seqlens_q->shape(0) < 1 || cu_seqlens_q->data()[cu_seqlens_q->shape(0) - 1] != q.dim(1)) {
      throw py::value_error("cu_seqlens_q must end at total_q = " + std::to_string(q.dim(1)) + ", the rows of q, got " +
                            (cu_seqlens_q->shape(0) < 1 ? std::string("no entries")
                                                        : std::to_string(cu_seqlens_q->data()[cu_seqlens_q->shape(0) - 1])));
    }
  }
  const std::int64_t batch = packed ? cu_seqlens_q->shape(0) - 1 : q.dim(0);
  if (!paged && k_cache.dim(0) != batch) {
    throw py::value_error("k_cache must have batch = " + std::to_string(batch) + " sequences in dimension 0, got " +
                          std::to_string(k_cache.dim(0)));
  }

  DecodeParams p;
  p.dtype = q.dtype;
  p.cache_dtype = quantized ? q.dtype : k_cache.dtype;
  p.cache_element = element;
  std::optional<Scales> k_scale, v_scale;
  if (quantized) {
    k_scale = ScalesOf(quantization.k_scale, "k_scale", k_cache);
    if (values_in_keys) {
      if (!quantization.v_scale.is_none()) {
        throw py::value_error("v_scale must be None when v_cache is None: V read inside k_cache is scaled by k_scale");
      }
    } else {
      v_scale = ScalesOf(quantization.v_scale, "v_scale", k_cache);
      if (v_scale->shape != k_scale->shape || v_scale->byte_strides != k_scale->byte_strides) {
        throw py::value_error("v_scale must have the shape and strides of k_scale (one set addresses both), got " +
                              ShapeString(v_scale->shape) + " and " + ShapeString(k_scale->shape));
      }
    }
    p.scale_granularity = k_scale->granularity, p.scale_group_size = k_scale->group_size;
    p.scale_strides = k_scale->strides;
    p.k_scale = static_cast<float*>(k_scale->array.mutable_data());
    p.quantize_query_int8 = quantization.quantize_query_int8;
    p.quantize_probs_u8 = quantization.quantize_probs_u8;
    if (v_scale) p.v_scale = static_cast<float*>(v_scale->array.mutable_data());
  } else if (quantization.quantize_query_int8 || quantization.quantize_probs_u8) {
    const char* flag = quantization.quantize_query_int8 ? "quantize_query_int8" : "quantize_probs_u8";
    throw py::value_error(std::string(flag) + " applies to an int8 cache; k_cache has dtype " +
                          std::string(py::str(k_cache.array.dtype())));
  } else if (!quantization.k_scale.is_none() || !quantization.v_scale.is_none()) {
    throw py::value_error("k_scale and v_scale apply to a quantized cache (int8, or cache_dtype='fp8_e4m3' or "
                          "'fp8_e5m2'); k_cache has dtype " + std::string(py::str(k_cache.array.dtype())));
  }
  p.batch = batch, p.seqlen_q = packed ? packing.max_seqlen_q : q.dim(1), p.heads_q = q.dim(2), p.head_dim = q.dim(3);
  if (packed) p.cu_seqlens_q = cu_seqlens_q->data();
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
    if (packed) PackAppend(*k, q, &p);
  } else if (!k_in.is_none()) {
    k = AttentionTensor(k_in, "k", 4, "(batch, seqlen_new, heads_kv, head_dim)", bf16);
    v = AttentionTensor(v_in, "v", 4, "(batch, seqlen_new, heads_kv, head_dim)", bf16);
    CheckSameDType(q, *k);  // the append converts the queries' float type to the cache's
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
    if (packed) PackAppend(*k, q, &p);
  }
  for (const std::optional<Scales>* scales : {&k_scale, &v_scale}) {  // v_scale: none when V is inside k_cache
    if (p.seqlen_new > 0 && *scales && (*scales)->granularity == ScaleGranularity::kPerToken &&
        !(*scales)->array.writeable()) {
      throw py::value_error(std::string(scales == &k_scale ? "k_scale" : "v_scale") +
                            " is read-only but the scales of appended keys are written to it");
    }
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
    // flash-attn's rule: the queries take consecutive positions only when causal or local; otherwise every
    // query sits at cache_seqlens[b].
    p.rotary_queries_at_cache_end = !causal && window_left < 0 && window_right < 0;
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

  const std::int64_t total_q = q.dim(1);  // packed: every row of q
  py::array out = packed ? NewArray(p.dtype, {total_q, p.heads_q, dv}) : NewArray(p.dtype, {p.batch, p.seqlen_q, p.heads_q, dv});
  p.o = out.mutable_data();
  p.o_strides = {packed ? 0 : p.seqlen_q * p.heads_q * dv, p.heads_q * dv, dv};
  if (packed) p.q_strides.batch = 0;
  py::object lse = py::none();
  if (return_lse) {
    py::array_t<float> lse_array = packed ? py::array_t<float>({p.heads_q, total_q})
                                          : py::array_t<float>({p.batch, p.heads_q, p.seqlen_q});
    p.lse = lse_array.mutable_data();
    lse = lse_array;
  }
  KvcacheCall call{p, {}, out, lse};
  for (const py::handle& array : {q_in, k_cache_in, v_cache_in, k_in, v_in, rotary_cos_in, rotary_sin_in,
                                  cache_seqlens_in, block_table_in, alibi_slopes, sinks,
                                  py::handle(quantization.k_scale), py::handle(quantization.v_scale)}) {
    call.held.push_back(py::reinterpret_borrow<py::object>(array));
  }
  if (cu_seqlens_q) call.held.push_back(*cu_seqlens_q);
  return call;
}

namespace {

py::tuple Kvcache(const py::handle& q, const py::handle& k_cache, const py::handle& v_cache, const py::handle& k,
                  const py::handle& v, const py::handle& rotary_cos, const py::handle& rotary_sin,
                  const py::handle& cache_seqlens, const py::handle& block_table, const py::handle& alibi_slopes,
                  std::optional<float> softmax_scale, bool causal, std::int64_t window_left,
                  std::int64_t window_right, float softcap, bool rotary_interleaved, std::int64_t num_splits,
                  bool return_lse, bool bf16, const py::handle& sinks, std::optional<std::int64_t> head_dim_v,
                  const py::object& k_scale, const py::object& v_scale, const std::optional<std::string>& cache_dtype,
                  bool quantize_query_int8, bool quantize_probs_u8, const py::object& cu_seqlens_q,
                  std::int64_t max_seqlen_q, const py::object& keys_after, bool check_only,
                  const py::object& key_indices, const py::object& block_mask, const py::object& document_ids) {
  KvcacheCall call = PrepareKvcache(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens,
                                    block_table, alibi_slopes, softmax_scale, causal, window_left, window_right,
                                    softcap, rotary_interleaved, num_splits, return_lse, bf16, sinks, head_dim_v,
                                    KvcacheQuantization{k_scale, v_scale, cache_dtype.value_or(""), quantize_query_int8,
                                                        quantize_probs_u8},
                                    KvcachePacking{cu_seqlens_q, max_seqlen_q});
  std::optional<py::array_t<std::int32_t>> keys_after_array;
  if (!keys_after.is_none()) {
    keys_after_array = ExactArray<std::int32_t>(keys_after, "keys_after", 1);
    if (keys_after_array->shape(0) != call.params.batch) {
      throw py::value_error("keys_after must have shape (batch,) = (" + std::to_string(call.params.batch) +
                            ",), got (" + std::to_string(keys_after_array->shape(0)) + ",)");
    }
    call.params.keys_after = keys_after_array->data();
  }
  const DecodeParams& p = call.params;
  call.params.key_indices =
      p.packed() ? SelectedKeysOf(key_indices, {p.total_query_rows()}, p.heads_kv, "(total_q, heads_kv, k)")
                 : SelectedKeysOf(key_indices, {p.batch, p.seqlen_q}, p.heads_kv, "(batch, seqlen_q, heads_kv, k)");
  ApplyBlockMask(block_mask, p.batch, p.seqlen_q, &call.params.block_mask);
  if (!document_ids.is_none()) {
    const auto ids = ExactArray<std::int32_t>(document_ids, "document_ids", 2);
    const std::int64_t capacity = p.paged() ? p.max_pages * p.page_size : p.cache_seqlen_max;
    if (ids.shape(0) != p.batch || ids.shape(1) != capacity) {
      throw py::value_error("document_ids must have shape (batch, cache capacity) = (" + std::to_string(p.batch) +
                            ", " + std::to_string(capacity) + "), got " + ShapeString({ids.shape(0), ids.shape(1)}));
    }
    call.params.document_ids = ids.data();
  }
  if (check_only) {
    validate(call.params);
    return py::make_tuple(py::none(), py::none());
  }
  EchoIfEnabled(call.params);
  {
    py::gil_scoped_release release;
    decode(call.params);
  }
  return py::make_tuple(call.out, call.lse);
}

// quantize_kv: (values, scales) of x (outer, seqlen, heads, head_dim), float32/float16/bfloat16.
py::tuple QuantizeKv(const py::handle& x_in, const std::string& dtype, const std::optional<std::string>& granularity,
                     std::int64_t group_size, bool bf16) {
  const Tensor x = AttentionTensor(x_in, "x", 4, "(batch or num_blocks, seqlen, heads_kv, head_dim)", bf16);
  QuantizeParams p;
  const std::optional<CacheElement> element = QuantizedElementNamed(dtype);
  if (!element) throw py::value_error("dtype must be 'int8', 'fp8_e4m3' or 'fp8_e5m2', got '" + dtype + "'");
  p.element = *element;
  p.granularity = default_scale_granularity(p.element, group_size);
  if (granularity) {
    const std::string& g = *granularity;
    if (g == "per_token") p.granularity = ScaleGranularity::kPerToken;
    else if (g == "per_head") p.granularity = ScaleGranularity::kPerHead;
    else if (g == "per_tensor") p.granularity = ScaleGranularity::kPerTensor;
    else throw py::value_error("granularity must be None, 'per_token', 'per_head' or 'per_tensor', got '" + g + "'");
  }
  p.x = x.data(), p.dtype = x.dtype, p.x_strides = BatchStrides(x);
  p.outer = x.dim(0), p.seqlen = x.dim(1), p.heads = x.dim(2), p.head_dim = x.dim(3), p.group_size = group_size;
  p.set_contiguous_strides();  // quantize_kv rejects a group size that does not divide head_dim
  py::array values(py::dtype(p.element == CacheElement::kInt8 ? "int8" : "uint8"),
                   std::vector<py::ssize_t>{p.outer, p.seqlen, p.heads, p.head_dim});
  std::vector<py::ssize_t> scale_shape;
  if (p.granularity == ScaleGranularity::kPerToken) {
    scale_shape = {p.outer, p.seqlen, p.heads};
    if (group_size > 0) scale_shape.push_back(p.head_dim / group_size);
  } else if (p.granularity == ScaleGranularity::kPerHead) {
    scale_shape = {p.heads};
  }
  py::array_t<float> scales(scale_shape);
  p.values = values.mutable_data(), p.scales = scales.mutable_data();
  EchoIfEnabled(p);
  {
    py::gil_scoped_release release;
    quantize_kv(p);
  }
  return py::make_tuple(values, scales);
}

}  // namespace

void RegisterKvcache(py::module_& m) {
  m.def("kvcache", &Kvcache, py::arg("q"), py::arg("k_cache"), py::arg("v_cache"), py::kw_only(),
        py::arg("k"), py::arg("v"), py::arg("rotary_cos"), py::arg("rotary_sin"), py::arg("cache_seqlens"),
        py::arg("block_table"), py::arg("alibi_slopes"), py::arg("softmax_scale"), py::arg("causal"),
        py::arg("window_left"), py::arg("window_right"), py::arg("softcap"), py::arg("rotary_interleaved"),
        py::arg("num_splits"), py::arg("return_lse"), py::arg("bf16") = false, py::arg("sinks") = py::none(),
        py::arg("head_dim_v") = py::none(), py::arg("k_scale") = py::none(), py::arg("v_scale") = py::none(),
        py::arg("cache_dtype") = py::none(), py::arg("quantize_query_int8") = false,
        py::arg("quantize_probs_u8") = false, py::arg("cu_seqlens_q") = py::none(), py::arg("max_seqlen_q") = 0,
        py::arg("keys_after") = py::none(), py::arg("check_only") = false, py::arg("key_indices") = py::none(),
        py::arg("block_mask") = py::none(), py::arg("document_ids") = py::none(),
        "flash_attn_with_kvcache's computation: returns (out, softmax_lse or None); appends k, v in place. "
        "v_cache None: V is the first head_dim_v features of k_cache. cu_seqlens_q: packed queries q (1, "
        "total_q, heads_q, d), out (total_q, heads_q, dv), softmax_lse (heads_q, total_q), k and v (1, total_q, "
        "heads_kv, d). keys_after (private): DecodeParams::keys_after, int32 (batch,), for the torch sharded "
        "decode. check_only (private): validate the call, write nothing, return (None, None). key_indices: int32 "
        "(batch, seqlen_q, heads_kv, k), packed (total_q, heads_kv, k), the selected keys of each row (-1 = "
        "unused), positions of the cache after the append. block_mask: the tuple of BlockMask.core_argument, lists "
        "(batch, heads, ceil(seqlen_q / block_size_q), width) over key blocks of the cache after the append; "
        "document_ids: int32 (batch, cache capacity).");
  m.def("quantize_kv", &QuantizeKv, py::arg("x"), py::kw_only(), py::arg("dtype"), py::arg("granularity"),
        py::arg("group_size"), py::arg("bf16") = false,
        "quantize_kv's computation: returns (values, scales) of a quantized cache holding x.");
}

}  // namespace flashattn::python
