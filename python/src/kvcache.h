// flash_attn_with_kvcache's arguments checked and turned into DecodeParams, for _core's kvcache (which runs
// decode()) and for _distributed's sharded decode (which runs the collective sharded_decode()).
#ifndef FLASHATTN_PYTHON_KVCACHE_H_
#define FLASHATTN_PYTHON_KVCACHE_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "arrays.h"
#include "flashattn/decode.h"

namespace flashattn::python {

namespace py = pybind11;

// The cache's element type: cache_dtype "int8", "fp8_e4m3" or "fp8_e5m2", or, when it is empty, int8 for an
// int8 k_cache and a float cache otherwise (a uint8 k_cache is an FP8 cache that lacks its cache_dtype).
CacheElement CacheElementOf(const std::string& cache_dtype, const py::handle& k_cache);
// A quantized cache: a 4-dimensional ndarray of int8 (or uint8 holding FP8 bytes) whose last dimension is
// contiguous; one byte per element, so its byte strides are its element strides.
Tensor ByteCacheTensor(const py::handle& object, const std::string& name, const char* layout, CacheElement element);

// A checked call: `params` points into the caller's arrays (kept alive in `held`) and into the new `out`
// and `lse` (float32 (batch, heads_q, seqlen_q), or (heads_q, total_q) for packed queries; None unless
// requested).
struct KvcacheCall {
  DecodeParams params;
  std::vector<py::object> held;
  py::array out;
  py::object lse;
};

// A quantized cache's scales (float32 arrays, None for a float cache) and cache_dtype ("int8", "fp8_e4m3",
// "fp8_e5m2", or empty: an int8 k_cache is int8, any other a float cache).
struct KvcacheQuantization {
  py::object k_scale = py::none();
  py::object v_scale = py::none();
  std::string cache_dtype;
  bool quantize_query_int8 = false;  // int8 cache: scores from int8 queries (DecodeParams::quantize_query_int8)
  bool quantize_probs_u8 = false;    // int8 cache: P̃V from u8-rounded weights (DecodeParams::quantize_probs_u8)
};

// Packed queries (flash_attn_varlen_func over a cache): cu_seqlens_q int32 (batch + 1,) or None, and
// max_seqlen_q. q then arrives as (1, total_q, heads_q, head_dim), and out is (total_q, heads_q, dv); k and v,
// if given, as (1, total_q, heads_kv, head_dim): each sequence appends the rows of its queries.
struct KvcachePacking {
  py::object cu_seqlens_q = py::none();
  std::int64_t max_seqlen_q = 0;
};

// Every check of flash_attn_with_kvcache but the library's own (decode() validates before it writes).
// v_cache None: V is the first head_dim_v (default: head_dim) features of each k_cache row (multi-head
// latent attention); v must then be None too. sinks: float32 (heads_q,) or None.
KvcacheCall PrepareKvcache(const py::handle& q, const py::handle& k_cache, const py::handle& v_cache,
                           const py::handle& k, const py::handle& v, const py::handle& rotary_cos,
                           const py::handle& rotary_sin, const py::handle& cache_seqlens,
                           const py::handle& block_table, const py::handle& alibi_slopes,
                           std::optional<float> softmax_scale, bool causal, std::int64_t window_left,
                           std::int64_t window_right, float softcap, bool rotary_interleaved,
                           std::int64_t num_splits, bool return_lse, bool bf16,
                           const py::handle& sinks = py::none(), std::optional<std::int64_t> head_dim_v = {},
                           const KvcacheQuantization& quantization = {}, const KvcachePacking& packing = {});

}  // namespace flashattn::python

#endif  // FLASHATTN_PYTHON_KVCACHE_H_
