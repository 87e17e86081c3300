// Decoding over a sharded KV cache on NumPy arrays: ShardedDecode is a prepared call (see distributed.h)
// whose constructor runs flash_attn_with_kvcache's checks on this rank's part of the cache and whose run()
// calls sharded_decode, returning the (out, softmax_lse) merged over every rank. cu_seqlens_q: packed queries,
// as the single-process kvcache takes them (q and k, v as (1, total_q, heads, dim)).
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "distributed.h"
#include "flashattn/distributed.h"
#include "kvcache.h"

namespace flashattn::python {
namespace {

class ShardedDecode {
 public:
  ShardedDecode(const py::handle& comm, const py::handle& q, const py::handle& k_cache,
                const py::handle& v_cache, const py::handle& cache_seqlens, const py::handle& k,
                const py::handle& v, const py::handle& rotary_cos, const py::handle& rotary_sin,
                const py::handle& block_table, const py::handle& alibi_slopes, std::optional<float> softmax_scale,
                bool causal, std::int64_t window_left, std::int64_t window_right, float softcap,
                bool rotary_interleaved, std::int64_t num_splits, const py::handle& sinks,
                std::optional<std::int64_t> head_dim_v, const py::object& k_scale, const py::object& v_scale,
                const std::optional<std::string>& cache_dtype, bool quantize_query_int8, bool quantize_probs_u8,
                const py::object& cu_seqlens_q, std::int64_t max_seqlen_q)
      : comm_(CommFromPython(comm)),
        call_(PrepareKvcache(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, block_table,
                             alibi_slopes, softmax_scale, causal, window_left, window_right, softcap,
                             rotary_interleaved, num_splits, /*return_lse=*/true, /*bf16=*/false, sinks,
                             head_dim_v,
                             KvcacheQuantization{k_scale, v_scale, cache_dtype.value_or(""), quantize_query_int8,
                                                 quantize_probs_u8},
                             KvcachePacking{cu_seqlens_q, max_seqlen_q})) {}

  py::tuple Run(double timeout_seconds) {
    {
      py::gil_scoped_release release;
      distributed::sharded_decode(call_.params, comm_, timeout_seconds);
    }
    return py::make_tuple(call_.out, call_.lse);
  }

 private:
  MPI_Comm comm_;
  KvcacheCall call_;
};

}  // namespace

void RegisterShardedDecode(py::module_& m) {
  py::class_<ShardedDecode>(m, "ShardedDecode", "This rank's part of a sharded decode call, checked locally.")
      .def(py::init<const py::handle&, const py::handle&, const py::handle&, const py::handle&,
                    const py::handle&, const py::handle&, const py::handle&, const py::handle&,
                    const py::handle&, const py::handle&, const py::handle&, std::optional<float>, bool,
                    std::int64_t, std::int64_t, float, bool, std::int64_t, const py::handle&,
                    std::optional<std::int64_t>, const py::object&, const py::object&,
                    const std::optional<std::string>&, bool, bool, const py::object&, std::int64_t>(),
           py::arg("comm"), py::arg("q"), py::arg("k_cache"), py::arg("v_cache"), py::arg("cache_seqlens"),
           py::kw_only(), py::arg("k"), py::arg("v"), py::arg("rotary_cos"), py::arg("rotary_sin"),
           py::arg("block_table"), py::arg("alibi_slopes"), py::arg("softmax_scale"), py::arg("causal"),
           py::arg("window_left"), py::arg("window_right"), py::arg("softcap"), py::arg("rotary_interleaved"),
           py::arg("num_splits"), py::arg("sinks") = py::none(), py::arg("head_dim_v") = py::none(),
           py::arg("k_scale") = py::none(), py::arg("v_scale") = py::none(), py::arg("cache_dtype") = py::none(),
           py::arg("quantize_query_int8") = false, py::arg("quantize_probs_u8") = false,
           py::arg("cu_seqlens_q") = py::none(), py::arg("max_seqlen_q") = 0)
      .def("run", &ShardedDecode::Run, py::kw_only(), py::arg("timeout_seconds"),
           "The collective call: returns (out, softmax_lse) merged over every rank.");
}

}  // namespace flashattn::python
