// The sparsity inputs forward and decode share: a block mask's lists (sizes, tensors, values), and key_indices,
// the selected keys (the list length, the tensor, and each list read once its tensor is known to be readable:
// positions of keys the row sees, no position twice).
#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "common/checked.h"
#include "common/score.h"
#include "flashattn/types.h"
#include "validate_checks.h"

namespace flashattn::validation {

void CheckBlockMaskSettings(const BlockMask& m, std::int64_t heads_q) {
  if (!m.active()) {
    if (m.kv_indices != nullptr || m.full_kv_num_blocks != nullptr || m.full_kv_indices != nullptr) {
      Fail("block_mask has lists but block_mask.kv_num_blocks is null (null means no block mask)");
    }
    return;
  }
  CheckRange("block_mask.block_size_q", m.block_size_q, 1, kUnboundedReach);
  CheckRange("block_mask.block_size_k", m.block_size_k, 1, kUnboundedReach);
  if (m.heads != 1 && m.heads != heads_q) Fail("block_mask.heads must be 1 or heads_q=", heads_q, ", got ", m.heads);
  CheckRange("block_mask.kv_width", m.kv_width, 0, INT32_MAX);
  CheckRange("block_mask.full_kv_width", m.full_kv_width, 0, INT32_MAX);
  if ((m.full_kv_num_blocks == nullptr) != (m.full_kv_indices == nullptr)) {
    Fail("block_mask.full_kv_num_blocks and block_mask.full_kv_indices must be both set or both null");
  }
}

void AddBlockMaskTensors(const BlockMask& m, const BlockMaskNames& names, std::int64_t batch, std::int64_t seqlen_q,
                         std::vector<TensorView>* inputs) {
  if (!m.active()) return;
  const std::int64_t Tq = (seqlen_q + m.block_size_q - 1) / m.block_size_q;
  std::int64_t per_head, per_head_full;
  if (!MulAdd(Tq, std::max(m.kv_width, m.full_kv_width), 0, &per_head) ||
      !MulAdd(per_head, m.heads, 0, &per_head_full) || !MulAdd(per_head_full, batch, 0, &per_head_full)) {
    Fail("block_mask's lists are too large to index in 64 bits (batch=", batch, " heads=", m.heads,
         " query blocks=", Tq, " width=", std::max(m.kv_width, m.full_kv_width), ")");
  }
  const auto counts = [&](const char* name, const std::int32_t* data) {
    return TensorView{name, data, 4, {{"batch", batch, m.heads * Tq}, {"head", m.heads, Tq}, {"query block", Tq, 1}}};
  };
  const auto lists = [&](const char* name, const std::int32_t* data, std::int64_t width) {
    return TensorView{name,
                      data,
                      4,
                      {{"batch", batch, m.heads * Tq * width},
                       {"head", m.heads, Tq * width},
                       {"query block", Tq, width},
                       {"entry", width, 1}}};
  };
  inputs->push_back(counts(names.kv_num_blocks, m.kv_num_blocks));
  inputs->push_back(lists(names.kv_indices, m.kv_indices, m.kv_width));
  if (m.full_kv_num_blocks != nullptr) {
    inputs->push_back(counts(names.full_kv_num_blocks, m.full_kv_num_blocks));
    inputs->push_back(lists(names.full_kv_indices, m.full_kv_indices, m.full_kv_width));
  }
}

void CheckBlockMaskLists(const BlockMask& m, const BlockMaskNames& names, std::int64_t seqlen_q,
                         const std::vector<std::int64_t>& Nk, const char* keys_name) {
  if (!m.active()) return;
  const auto batch = static_cast<std::int64_t>(Nk.size());
  const std::int64_t Tq = (seqlen_q + m.block_size_q - 1) / m.block_size_q;
  const auto key_blocks = [&](std::int64_t b) { return (Nk[b] + m.block_size_k - 1) / m.block_size_k; };
  std::int64_t most = 0;
  for (std::int64_t b = 0; b < batch; ++b) most = std::max(most, key_blocks(b));
  std::vector<std::int64_t> seen(static_cast<std::size_t>(most), -1);  // the last list (b, h, r) naming each block
  for (std::int64_t list = 0; list < batch * m.heads * Tq; ++list) {
    const std::int64_t b = list / (m.heads * Tq), h = list / Tq % m.heads, r = list % Tq, Tk = key_blocks(b);
    const auto check = [&](const char* num_name, const char* index_name, const std::int32_t* num,
                           const std::int32_t* indices, std::int64_t width) {
      if (num == nullptr) return;
      const std::int32_t n = num[list];
      if (n < 0 || n > width) {
        Fail(num_name, "[", b, ", ", h, ", ", r, "] must be in [0, ", width, "] (the list width), got ", n);
      }
      for (std::int32_t e = 0; e < n; ++e) {
        const std::int32_t c = indices[list * width + e];
        if (c < 0 || c >= Tk) {
          Fail(index_name, "[", b, ", ", h, ", ", r, ", ", e, "] must be a key block in [0, ", Tk, ") (", keys_name,
               "=", Nk[b], ", block_size_k=", m.block_size_k, "), got ", c);
        }
        if (seen[static_cast<std::size_t>(c)] == list) {
          Fail("key block ", c, " is listed twice for query block ", r, " of batch ", b, " head ", h, " (",
               index_name, "[", b, ", ", h, ", ", r, ", ", e, "]; a block is in kv_indices or full_kv_indices, once)");
        }
        seen[static_cast<std::size_t>(c)] = list;
      }
    };
    check(names.kv_num_blocks, names.kv_indices, m.kv_num_blocks, m.kv_indices, m.kv_width);
    check(names.full_kv_num_blocks, names.full_kv_indices, m.full_kv_num_blocks, m.full_kv_indices, m.full_kv_width);
  }
}

TensorView KeySelectionView(const KeySelection& s, std::int64_t rows, std::int64_t heads_kv) {
  if (s.indices == nullptr && s.count != 0) {
    Fail("key_indices.count=", s.count, " is set but key_indices.indices is null (null selects every key)");
  }
  if (s.indices != nullptr && s.count < 1) {
    Fail("key_indices.count must be >= 1 when key_indices.indices is set, got ", s.count);
  }
  std::int64_t list_stride = 0;
  if (!MulAdd(heads_kv, s.count, 0, &list_stride)) {
    Fail("key_indices is too large to index in 64 bits (heads_kv=", heads_kv, " count=", s.count, ")");
  }
  return TensorView{"key_indices", s.indices, 4, {{"row", rows, list_stride}, {"head", heads_kv, s.count},
                                                  {"slot", s.count, 1}}};
}

SelectedLists::SelectedLists(const KeySelection& s, std::int64_t heads_kv, std::int64_t max_keys)
    : s_(s), heads_kv_(heads_kv), last_list_(static_cast<std::size_t>(max_keys), -1) {}

void SelectedLists::CheckRow(const SelectedRow& row) {
  const std::int64_t k = s_.count;
  for (std::int64_t g = 0; g < heads_kv_; ++g) {
    const std::int32_t* list = s_.indices + (row.index * heads_kv_ + g) * k;
    const std::int64_t id = row.index * heads_kv_ + g;
    const auto fail = [&](std::int64_t slot, const auto&... why) {
      Fail("key_indices", row.Where(), " of K/V head ", g, " holds ", list[slot], " at slot ", slot, ": ", why...);
    };
    for (std::int64_t slot = 0; slot < k; ++slot) {
      const std::int64_t j = list[slot];
      if (j == -1) continue;
      if (j < -1) fail(slot, "a position is >= 0, or -1 for an unused slot");
      if (j >= row.Nk) fail(slot, "beyond the sequence's ", row.Nk, " keys (", row.keys_name, ")");
      if (j > row.diagonal + row.band.right && row.causal) {
        fail(slot, "beyond the causal diagonal ", row.diagonal, " of query row ", row.i);
      }
      if (!row.band.Sees(row.diagonal, j)) {
        fail(slot, "outside the sliding window [", row.diagonal - row.band.left, ", ", row.diagonal + row.band.right,
             "] of query row ", row.i);
      }
      std::int64_t& last = last_list_[static_cast<std::size_t>(j)];
      if (last == id) fail(slot, "a position twice in one list (each list is a set)");
      last = id;
    }
  }
}

std::string SelectedRow::Where() const {
  std::ostringstream where;
  if (packed_row < 0) {
    where << "[" << b << "][" << i << "]";
  } else {
    where << "[" << packed_row << "] (sequence " << b << ", query row " << i << ")";
  }
  return where.str();
}

}  // namespace flashattn::validation
