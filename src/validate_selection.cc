// key_indices, the selected keys of forward and decode: the list length, the tensor, and each list read once
// its tensor is known to be readable: positions of keys the row sees, no position twice.
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "common/checked.h"
#include "common/score.h"
#include "flashattn/types.h"
#include "validate_checks.h"

namespace flashattn::validation {

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
