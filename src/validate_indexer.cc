// The lightning indexer's parameters: the sizes, the cache's element type and layout (decode's checks), the
// tensors, and last the index tensors (cache_seqlens, the block table), read only once they are readable.
#include <cstdint>
#include <vector>

#include "common/cache_element_traits.h"
#include "common/quantize.h"
#include "flashattn/indexer.h"
#include "validate_checks.h"

namespace flashattn {

using namespace validation;

namespace {

void CheckSizes(const IndexerParams& p) {
  CheckDType("dtype", p.dtype);
  CheckSize("batch", p.batch, 0);
  CheckSize("seqlen_q", p.seqlen_q, 0);
  CheckSize("heads", p.heads, 1);
  CheckRange("head_dim", p.head_dim, 1, kMaxHeadDim);
  CheckSize("top_k", p.top_k, 1);
  CheckThreads(p.num_threads);
}

// A float cache has no scales; a quantized one has one per key row.
void CheckCacheElement(const IndexerParams& p) {
  if (!IsCacheElement(p.cache_element)) {
    Fail("cache_element has an unknown value ", static_cast<int>(p.cache_element));
  }
  if (!Quantized(p.cache_element)) {
    CheckDType("cache_dtype", p.cache_dtype);
    if (p.k_scale != nullptr) Fail("k_scale must be null for a float cache (cache_element=float)");
  } else if (p.k_scale == nullptr) {
    Fail("k_scale is a null pointer but cache_element=", to_string(p.cache_element),
         " needs one float32 scale per key row");
  }
}

// Positions are int32 in key_indices: without cache_seqlens, a sequence has cache_seqlen_max keys.
void CheckSequenceLengths(const IndexerParams& p) {
  if (p.cache_seqlens != nullptr) return;
  if (p.paged()) Fail("cache_seqlens is a null pointer but the cache is paged (block_table set)");
  CheckRange("cache_seqlen_max", p.cache_seqlen_max, 0, INT32_MAX);
}

void CheckTensors(const IndexerParams& p) {
  const std::int64_t outer = p.paged() ? p.num_pages : p.batch;
  const std::int64_t seq = p.paged() ? p.page_size : p.cache_seqlen_max;
  std::vector<TensorView> inputs = {
      BatchTensor("q", p.q, p.dtype, p.q_strides, p.batch, p.seqlen_q, p.heads, p.head_dim),
      BatchTensor("k_cache", p.k_cache, CacheElementBytes(p.cache_element, p.cache_dtype), p.cache_strides, outer,
                  seq, 1, p.head_dim),
      TensorView{"weights", p.weights, 4, {{"batch", p.batch, p.seqlen_q * p.heads}, {"seq", p.seqlen_q, p.heads},
                                           {"head", p.heads, 1}}}};
  if (Quantized(p.cache_element)) {
    inputs.push_back(TensorView{
        "k_scale", p.k_scale, 4, {{"batch", outer, p.scale_strides.batch}, {"seq", seq, p.scale_strides.seq}}});
  }
  if (p.cache_seqlens != nullptr) {
    inputs.push_back(TensorView{"cache_seqlens", p.cache_seqlens, 4, {{"batch", p.batch, 1}}});
  }
  if (p.paged()) inputs.push_back(BlockTableView(CacheLayout::Of(p)));
  const auto output = [&](const char* name, const void* data) {
    return TensorView{name, data, 4, {{"batch", p.batch, p.seqlen_q * p.top_k}, {"seq", p.seqlen_q, p.top_k},
                                      {"slot", p.top_k, 1}}};
  };
  std::vector<TensorView> outputs = {output("key_indices", p.key_indices)};
  if (p.scores != nullptr) outputs.push_back(output("scores", p.scores));
  CheckOutputs(outputs, inputs);
}

// Each sequence's key count within the capacity, and the pages that hold its keys.
void CheckIndexTensors(const IndexerParams& p, std::int64_t capacity) {
  if (p.cache_seqlens == nullptr) return;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t Nk = p.cache_seqlens[b];
    if (Nk < 0 || Nk > capacity) {
      Fail("cache_seqlens[", b, "] must be in [0, ", capacity, "] (the cache capacity",
           p.paged() ? ", max_pages·page_size" : ", cache_seqlen_max", "), got ", Nk);
    }
    if (p.paged()) CheckPages(CacheLayout::Of(p), b, Nk);
  }
}

}  // namespace

void validate(const IndexerParams& p) {
  CheckSizes(p);
  CheckCacheElement(p);
  const std::int64_t capacity = CheckCapacity(CacheLayout::Of(p));
  CheckSequenceLengths(p);
  // The products of sizes above stay in int64: the tensor checks bound each tensor's furthest offset.
  std::int64_t rows;
  if (!MulAdd(p.batch, p.seqlen_q, 0, &rows) || !MulAdd(rows, p.heads, 0, &rows) ||
      !MulAdd(p.batch * p.seqlen_q, p.top_k, 0, &rows)) {
    Fail("batch·seqlen_q·heads or batch·seqlen_q·top_k is too large (batch=", p.batch, " seqlen_q=", p.seqlen_q,
         " heads=", p.heads, " top_k=", p.top_k, ")");
  }
  CheckTensors(p);
  CheckIndexTensors(p, capacity);
}

}  // namespace flashattn
