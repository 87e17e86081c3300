#include "bench/sparse.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

namespace flashattn::bench {
namespace {

constexpr std::int64_t kDocuments = 8;
constexpr std::int64_t kWindow = 512, kGlobalKeys = 64;

// Key block 0 (the global keys, one block of 64) made full for every query block past the first.
void AddGlobalBlock(BlockMaskLists* m) {
  const std::int64_t width = m->key_blocks;
  for (std::int64_t list = 0; list < m->batch * m->query_blocks; ++list) {
    if (list % m->query_blocks == 0 || width == 0) continue;
    std::int32_t* partial = m->kv_indices.data() + list * width;
    std::int32_t& partial_count = m->kv_num_blocks[list];
    std::int32_t* const partial_end = partial + partial_count;
    if (std::find(partial, partial_end, 0) != partial_end) {  // sorted: it is the first entry
      std::copy(partial + 1, partial_end, partial);
      --partial_count;
    }
    std::int32_t* full = m->full_kv_indices.data() + list * width;
    std::int32_t& full_count = m->full_kv_num_blocks[list];
    if (full_count > 0 && full[0] == 0) continue;
    std::copy_backward(full, full + full_count, full + full_count + 1);
    full[0] = 0;
    ++full_count;
  }
}

}  // namespace

SparseInputs::SparseInputs(const BenchCase& c) : sparsity_(c.sparsity) {
  if (sparsity_ == Sparsity::kDocuments) {
    documents_.resize(static_cast<std::size_t>(c.batch * c.seqlen_k));
    for (std::int64_t b = 0; b < c.batch; ++b)
      for (std::int64_t j = 0; j < c.seqlen_k; ++j)
        documents_[b * c.seqlen_k + j] = static_cast<std::int32_t>(j * kDocuments / c.seqlen_k);
    lists_ = create_block_mask(c.batch, c.seqlen_q, c.seqlen_k, 128, 128, true, -1, -1, documents_.data(), 0);
  } else if (sparsity_ == Sparsity::kSlidingGlobal) {
    lists_ = create_block_mask(c.batch, c.seqlen_q, c.seqlen_k, kGlobalKeys, kGlobalKeys, true, kWindow, 0,
                               nullptr, 0);
    AddGlobalBlock(&lists_);
  }
}

void SparseInputs::Apply(AttentionParams* p) const {
  if (sparsity_ == Sparsity::kNone) return;
  p->causal = true;
  if (sparsity_ == Sparsity::kSlidingGlobal) p->window_left = kWindow;
  if (!documents_.empty()) p->document_ids = documents_.data();
  p->block_mask = lists_.view();
}

double SparseInputs::VisitedFraction() const {
  const double all = static_cast<double>(lists_.batch * lists_.query_blocks * lists_.key_blocks);
  double listed = 0;
  for (std::int32_t n : lists_.kv_num_blocks) listed += n;
  for (std::int32_t n : lists_.full_kv_num_blocks) listed += n;
  return all > 0 ? listed / all : 0.0;
}

AttentionParams DenseParams(AttentionParams p) {
  p.block_mask = {};
  p.document_ids = nullptr;
  p.causal = false;
  p.window_left = p.window_right = -1;
  return p;
}

std::string SparseNote(double median_ms, double dense_median_ms, double visited) {
  std::ostringstream s;
  s << std::setprecision(3) << "dense " << dense_median_ms << " ms; visited " << visited
    << " of blocks; time/(visited·dense) " << median_ms / (visited * dense_median_ms)
    << "; time − visited·dense = " << 100 * (median_ms - visited * dense_median_ms) / dense_median_ms
    << "% of dense";
  return s.str();
}

}  // namespace flashattn::bench
