// The lightning indexer's public entry points: validated whole, then run by the kernel of the cache's element
// type.
#include "flashattn/indexer.h"
#include "indexer/indexer.h"

namespace flashattn {

void IndexerParams::set_contiguous_strides() {
  q_strides = {seqlen_q * heads * head_dim, heads * head_dim, head_dim};
  const std::int64_t rows = paged() ? page_size : cache_seqlen_max;
  cache_strides = {rows * head_dim, head_dim, head_dim};
  scale_strides = {rows, 1, 1};
}

void lightning_indexer(const IndexerParams& params) {
  validate(params);
  indexer_kernel::LightningIndexer(params);
}

}  // namespace flashattn
