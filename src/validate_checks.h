// The checks that the validation files share. All validation of the public entry points lives in
// validate_*.cc, so that the algorithms may assume valid input, and every check runs before any output is
// touched: a call that throws has written nothing.
//
// The checks build on each other: the settings every attention call shares (HeadSettings: heads, head
// dimensions, element type, score modifiers, threads) are checked by one function that forward, varlen,
// backward and decode use; every call describes its tensors as TensorViews, checked for sizes, strides, null
// pointers and overlaps by CheckOutputs; only then are index tensors (cu_seqlens, block tables) and LSE
// values read.
//
//   validate_tensors.cc    tensor views: sizes, strides, overlaps; the LSE and sink tensors
//   validate_attention.cc  HeadSettings, then forward, varlen, backward, the dropout masks and merge
//   validate_decode.cc     decode, and the cache layout it shares with the indexer
//   validate_indexer.cc    the lightning indexer
//   validate_quantize.cc   quantized caches: their element types, scales and values; quantize_kv
//   validate_selection.cc  the selected keys of forward and decode (key_indices)
#ifndef FLASHATTN_VALIDATE_CHECKS_H_
#define FLASHATTN_VALIDATE_CHECKS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/checked.h"
#include "common/score.h"
#include "flashattn/decode.h"
#include "flashattn/types.h"

namespace flashattn::validation {

inline void CheckSize(const char* name, std::int64_t value, std::int64_t min) {
  if (value < min) Fail(name, " must be >= ", min, ", got ", value);
}

inline void CheckRange(const char* name, std::int64_t value, std::int64_t min, std::int64_t max) {
  if (value < min || value > max) Fail(name, " must be in [", min, ", ", max, "], got ", value);
}

// ---- Settings (validate_attention.cc) ---------------------------------------------------------------------

void CheckDType(const char* name, DType dtype);
// num_threads: 0 (all cores) or a count up to a bound far above any machine's.
void CheckThreads(int num_threads);
// Everything HeadSettings holds: the element type, the heads, d and dv, the score modifiers and threads.
void CheckHeadSettings(const HeadSettings& s);

// ---- Tensors (validate_tensors.cc) ------------------------------------------------------------------------

struct Dim {
  const char* name;
  std::int64_t size;
  std::int64_t stride;  // in elements
};

// A strided tensor as the validator sees it: where it is, how large its elements are, its dimensions.
struct TensorView {
  const char* name;
  const void* data;
  std::int64_t element_bytes;
  std::vector<Dim> dims;

  // INT64_MAX if the count overflows.
  std::int64_t NumElements() const {
    std::int64_t count = 1;
    for (const Dim& dim : dims) {
      if (dim.size == 0) return 0;
      if (!MulAdd(count, dim.size, 0, &count)) return INT64_MAX;
    }
    return count;
  }
};

// Checks every tensor (strides, sizes, 64-bit offsets, data when not empty), that no output overlaps itself,
// an input, or another output.
void CheckOutputs(const std::vector<TensorView>& outputs, const std::vector<TensorView>& inputs);

// A (batch, seq, head, dim) tensor of `element_bytes` elements, or of `dtype`'s, its feature stride 1.
TensorView BatchTensor(const char* name, const void* data, std::int64_t element_bytes, const Strides& s,
                       std::int64_t batch, std::int64_t seqlen, std::int64_t heads, std::int64_t dim);
TensorView BatchTensor(const char* name, const void* data, DType dtype, const Strides& s, std::int64_t batch,
                       std::int64_t seqlen, std::int64_t heads, std::int64_t dim);
// float32 ALiBi slopes: (heads_q), or (batch, heads_q) with row stride batch_stride.
TensorView AlibiView(const char* name, const float* slopes, std::int64_t batch_stride, std::int64_t batch,
                     std::int64_t heads_q);
// float32 (batch, heads, seqlen), contiguous.
TensorView LseView(const char* name, const float* lse, std::int64_t batch, std::int64_t heads,
                   std::int64_t seqlen);
// float32 (Hq): the attention sinks, or their gradient.
TensorView SinksView(const char* name, const float* sinks, std::int64_t heads_q);

// The forward pass's LSE as backward reads it: present, and each value the normalizer of a softmax, so
// finite, or −∞ for a row that saw no key. RequireLse runs before the tensors are checked, CheckLseValues
// after.
void RequireLse(const char* name, const char* call, const float* lse, std::int64_t batch, std::int64_t heads,
                std::int64_t seqlen);
void CheckLseValues(const char* name, const float* lse, std::int64_t batch, std::int64_t heads,
                    std::int64_t seqlen);
// The attention sinks, one logit per query head: each finite, or −∞ for no sink.
void CheckSinkValues(const char* name, const float* sinks, std::int64_t heads_q);

// ---- Cache layouts (validate_decode.cc) -------------------------------------------------------------------

// Where a cache's rows are, as decode and the indexer describe them (the same field names and meaning).
struct CacheLayout {
  std::int64_t batch = 0;
  std::int64_t cache_seqlen_max = 0;
  const std::int32_t* block_table = nullptr;
  std::int64_t block_table_stride = 0, max_pages = 0, num_pages = 0, page_size = 0;

  bool paged() const { return block_table != nullptr; }
  template <class Params>
  static CacheLayout Of(const Params& p) {
    return {p.batch, p.cache_seqlen_max, p.block_table, p.block_table_stride, p.max_pages, p.num_pages, p.page_size};
  }
};

// Each sequence's capacity, in keys: max_pages·page_size of a paged cache, cache_seqlen_max of another.
std::int64_t CheckCapacity(const CacheLayout& c);
// The block table as a (batch, max_pages) int32 input tensor.
TensorView BlockTableView(const CacheLayout& c);
// The table entries of the pages that hold sequence b's first Nk keys, each in [0, num_pages).
void CheckPages(const CacheLayout& c, std::int64_t b, std::int64_t Nk);

// ---- Quantized caches (validate_quantize.cc) --------------------------------------------------------------

void CheckQuantization(const char* element_name, CacheElement element, const char* granularity_name,
                       ScaleGranularity granularity);
// Scales per group of `group_size` features: only per token, 0 (the whole row) or a divisor of d. Returns
// the groups per row.
std::int64_t CheckGroupSize(const char* name, std::int64_t group_size, ScaleGranularity granularity,
                            std::int64_t d);
// float32 scales: per token (outer, seqlen, heads, groups) with strides s, per head (heads), per tensor one.
TensorView ScaleView(const char* name, const float* scales, ScaleGranularity granularity, const Strides& s,
                     std::int64_t outer, std::int64_t seqlen, std::int64_t heads, std::int64_t groups);
// Values about to be quantized must be finite: an inf or NaN has no scale.
void CheckFinite(const char* name, const void* x, DType dtype, const Strides& s, std::int64_t outer,
                 std::int64_t seqlen, std::int64_t heads, std::int64_t d);
// A fixed scale quantizes appended values: finite and > 0.
void CheckFixedScales(const TensorView& scales);

// ---- Block masks (validate_selection.cc) ------------------------------------------------------------------

// The names a call's block-mask lists go by in messages.
struct BlockMaskNames {
  const char *kv_num_blocks, *kv_indices, *full_kv_num_blocks, *full_kv_indices;
};

// The block sizes, heads (1 or heads_q), widths, and lists set together (or none but kv_num_blocks null).
void CheckBlockMaskSettings(const BlockMask& m, std::int64_t heads_q);
// The lists as (batch, heads, ⌈seqlen_q/Qb⌉) counts and (batch, heads, ⌈seqlen_q/Qb⌉, width) indices.
void AddBlockMaskTensors(const BlockMask& m, const BlockMaskNames& names, std::int64_t batch, std::int64_t seqlen_q,
                         std::vector<TensorView>* inputs);
// Every list, once readable: counts in [0, width], indices in [0, ⌈Nk[b]/Kb⌉) for sequence b (keys_name says
// what Nk is), no key block twice for one query block.
void CheckBlockMaskLists(const BlockMask& m, const BlockMaskNames& names, std::int64_t seqlen_q,
                         const std::vector<std::int64_t>& Nk, const char* keys_name);

// ---- Selected keys (validate_selection.cc) ----------------------------------------------------------------

// key_indices as the tensor (rows, Hkv, k) of int32, contiguous; its count checked first (≥ 1 when set, 0 when
// not).
TensorView KeySelectionView(const KeySelection& s, std::int64_t rows, std::int64_t heads_kv);

// Query row i of sequence b, row `index` of key_indices (packed_row: the same, named when queries are packed,
// else −1): the keys it may select are those of [0, Nk) on its band around `diagonal`.
struct SelectedRow {
  std::int64_t index, packed_row, b, i;
  std::int64_t Nk;
  const char* keys_name;  // what Nk is, for the message: "seqlen_k", "cache_seqlens[b] + appended keys"
  std::int64_t diagonal;
  Band band;
  bool causal;

  std::string Where() const;
};

// Reads every list of key_indices a call's rows own, each once: every entry −1 or a position the row sees, no
// position twice in one list. Each Error names the row, the K/V head, the slot and the value.
class SelectedLists {
 public:
  SelectedLists(const KeySelection& s, std::int64_t heads_kv, std::int64_t max_keys);
  void CheckRow(const SelectedRow& row);

 private:
  const KeySelection& s_;
  const std::int64_t heads_kv_;
  std::vector<std::int64_t> last_list_;  // per position, the last list that held it
};

}  // namespace flashattn::validation

#endif  // FLASHATTN_VALIDATE_CHECKS_H_
