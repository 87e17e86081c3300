// The decode kernel's plain interface: Flash-Decoding's split-KV steps around the streaming kernel of
// attend.h (SplitKv, split_kv.cc), and the kernel's entry points. No SIMD types: the kernel is compiled for
// every Highway target and one of them is chosen at run time, once per call (src/simd/dispatch.h).
//   1. Plan the split and allocate everything before the cache is touched.
//   2. Append: k_new (rotated) and v_new go into the cache at positions cache_seqlens[b] + i, rounded to the
//      cache's float type or quantized (common/quantize.h).
//   3. Per row group (sequence b, or a block of its rows when the queries are packed) and K/V head: gather
//      its R = (Hq/Hkv)·Nq query rows (rotated, rounded to dtype) into one float32 tile, so each K/V byte is
//      read once for all of them. A packed sequence's rows come in blocks of at most kPackedRowsPerGroup query
//      rows per K/V head, so that the working memory of a task stays that of a decode step however long
//      the sequence's queries are.
//   4. Split the keys the rows can see into chunks; every (row group, chunk) is one parallel work item
//      (AttendChunk, all K/V heads, so the cache is read in address order) that leaves partials (O_k, LSE_k)
//      behind. With selected keys (key_indices) each query row is a row group of its own, whose G rows per K/V
//      head share their list: the list of each K/V head, −1 dropped and sorted into address order, is split
//      into chunks, every (row group, K/V head, chunk) one work item. A block mask or document ids become such
//      lists: each row's visible positions, per K/V head, or per query head when the mask has a list per
//      query head (RowLists).
//   5. Merge each row's partials by LSE (MergeRow, the operation of merge_attention_states) into O and LSE.
// DecodeT (decode-inl.h) runs them, steps 1-3 and 5 in this plain code and step 4 per target.
#ifndef FLASHATTN_DECODE_DECODE_H_
#define FLASHATTN_DECODE_DECODE_H_

#include <cstdint>
#include <vector>

#include "common/cache_element_traits.h"
#include "common/score.h"
#include "decode/attend.h"
#include "flashattn/decode.h"
#include "simd/dispatch.h"

namespace flashattn::decode_kernel {

// A packed sequence's query rows per K/V head (R) in one work item, at least one query row: a block of 64
// rows of d = 128 keeps Q, Õ and the scores of a head within 80 KiB.
inline constexpr std::int64_t kPackedRowsPerGroup = 64;

// Whether each query row reads a list of positions of its own (selected keys, or the keys a block mask and the
// document ids leave it) rather than the keys of its band.
inline bool RowLists(const DecodeParams& p) {
  return p.key_indices.active() || p.block_mask.active() || p.document_ids != nullptr;
}
// The lists a row has: one per K/V head, or one per query head for a block mask with a list per query head.
inline std::int64_t ListHeads(const DecodeParams& p) {
  return p.block_mask.active() && p.block_mask.heads != 1 ? p.heads_q : p.heads_kv;
}

// The sequences whose query rows the decode kernel attends; it appends the new keys of every sequence. The
// scheduler (src/decode_schedule.cc) leaves out those with many query rows, which it runs through the forward
// kernel. No entries: every sequence.
struct KernelSequences {
  std::vector<bool> left_out;  // per sequence b

  bool Attends(std::int64_t b) const { return left_out.empty() || !left_out[static_cast<std::size_t>(b)]; }
};

class SplitKv {
 public:
  // Step 1: plans the chunks and allocates the partials and the gathered rows; writes nothing.
  SplitKv(const DecodeParams& params, const KernelSequences& sequences);

  int Threads() const { return threads_; }
  std::int64_t Items() const { return items_; }  // row groups × chunks
  std::int64_t Heads() const { return p_.heads_kv; }
  std::int64_t RowsPerHead() const { return R_; }  // the largest R of a row group

  // Steps 2 and 3. False when there are no query rows: the append was the whole call.
  bool AppendAndGather();
  // Step 4: work item `item`, chunk item mod splits of row group item div (splits·head items) (of K/V head
  // item div splits mod Hkv with selected keys), writing its partials.
  ChunkTask Task(std::int64_t item);
  // Step 5.
  void Merge();

 private:
  // The query rows [i0, i0 + Nq) of sequence b: row r = g·Nq + i of K/V head hk is query i0 + i of head
  // hk·G + g, stored at (hk·R + r) of Q, R = G·Nq. mods count rows from i0. Its chunk s leaves its Hkv·R
  // partial rows at partials + s·Hkv·R.
  struct RowGroup {
    std::int64_t b = 0, i0 = 0, Nq = 0;
    std::int64_t partials = 0;
    std::vector<float> Q;                 // Hkv·R×d
    std::vector<ScoreModifiers> mods;     // Hq, one per query head
    std::int64_t j_begin = 0, j_end = 0;  // the keys any row may see
    // Row lists: list l's positions at selected[l·list_stride ...] (stride 0: one list every head shares),
    // selected_count[l] of them; with ALiBi each query head's slope (ChunkTask::alibi).
    std::vector<std::int32_t> selected;
    std::vector<std::int64_t> selected_count;
    std::int64_t list_stride = 0;
    std::vector<float> alibi;
  };
  // The row groups of the call (Q, mods and keys not yet gathered): one per attended sequence, or per block
  // of kPackedRowsPerGroup rows of a packed sequence, none for a packed sequence without rows.
  static std::vector<RowGroup> PlanRowGroups(const DecodeParams& p, const KernelSequences& sequences);
  void GatherRows(RowGroup& rows) const;
  void SelectKeys(RowGroup& rows) const;
  void MaskKeys(RowGroup& rows) const;
  void UnbandedRows(RowGroup& rows) const;

  const DecodeParams& p_;
  const Band band_;
  std::vector<RowGroup> groups_;
  const std::int64_t R_;
  const int threads_;
  // A work item covers every K/V head, or one list's heads (row lists: head_items_ = ListHeads items per chunk).
  const std::int64_t head_items_;
  std::int64_t splits_ = 1, items_ = 0, partial_rows_ = 0;
  std::vector<float> O_partial_, lse_partial_, o_row_;
};

// The kernel for one cache element type on the best target of this CPU (decode_f32.cc, ..., decode_i8.cc,
// decode_fp8_e4m3.cc, decode_fp8_e5m2.cc); the queries and outputs may be of any float type.
void DecodeF32(const DecodeParams& params, const KernelSequences& sequences);
void DecodeF16(const DecodeParams& params, const KernelSequences& sequences);
void DecodeBF16(const DecodeParams& params, const KernelSequences& sequences);
void DecodeI8(const DecodeParams& params, const KernelSequences& sequences);
void DecodeFp8E4M3(const DecodeParams& params, const KernelSequences& sequences);
void DecodeFp8E5M2(const DecodeParams& params, const KernelSequences& sequences);

// The kernel of a quantized cache by its storage type (simd::CallForCacheElement).
template <typename Storage>
struct QuantizedDecode;
template <>
struct QuantizedDecode<std::int8_t> {
  static void Call(const DecodeParams& params, const KernelSequences& sequences) { DecodeI8(params, sequences); }
};
template <>
struct QuantizedDecode<Fp8E4M3> {
  static void Call(const DecodeParams& params, const KernelSequences& sequences) { DecodeFp8E4M3(params, sequences); }
};
template <>
struct QuantizedDecode<Fp8E5M2> {
  static void Call(const DecodeParams& params, const KernelSequences& sequences) { DecodeFp8E5M2(params, sequences); }
};

// quantize_kv on the best target of this CPU, by the input's float type (quantize.cc).
void QuantizeKvF32(const QuantizeParams& params);
void QuantizeKvF16(const QuantizeParams& params);
void QuantizeKvBF16(const QuantizeParams& params);

// The targets DecodeI8 is compiled for that this CPU runs (call it before restricting the dispatch): those
// of simd::CompiledTargets() and AVX3_DL, which only the int8 kernel is compiled for (decode_i8.cc).
std::vector<std::int64_t> Int8KernelTargets();

// Appends the new keys of every sequence, attends those of `sequences`, and writes their O (and LSE): one
// dispatch, by cache element type and SIMD target.
inline void Decode(const DecodeParams& params, const KernelSequences& sequences) {
  simd::CallForCacheElement<DecodeF32, DecodeF16, DecodeBF16, QuantizedDecode>(params.cache_element,
                                                                               params.cache_dtype, params, sequences);
}

}  // namespace flashattn::decode_kernel

#endif  // FLASHATTN_DECODE_DECODE_H_
