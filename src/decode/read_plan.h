// The read planner of the decode kernel: where the rows of each block of keys are, and the requests that
// bring the next block into L2 while this one is computed. Plain C++ (no vector types); the per-target steps
// of attend-inl.h read the rows it locates and pace its requests.
//
// A core reads main memory fastest with many lines in flight. A chunk reads two streams (K and V), which the
// hardware prefetchers alone keep too few lines ahead of, so the next block's lines are requested in address
// order, a few at a time as the current block's tiles run: its K lines while the scores of this block are
// formed, its V lines while P̃ V is (PrefetchLine, into every level). One request per 64-byte line: requesting
// every other line and leaving the rest to the hardware gave no gain over no requests at all.
#ifndef FLASHATTN_DECODE_READ_PLAN_H_
#define FLASHATTN_DECODE_READ_PLAN_H_

#include <algorithm>
#include <cstdint>
#include <utility>

#include "common/prefetch.h"
#include "decode/attend.h"

namespace flashattn::decode_kernel {

// Keys [j0, j0 + cols) of a chunk, cols ≤ kDecodeBc: the element offset of each key's row for K/V head 0, in
// the cache and in its scales, through the block table when paged. Offsets past `cols` repeat the first
// key's, so that pointers formed from any of them are readable.
struct BlockRows {
  std::int64_t j0 = 0, cols = 0;
  std::int64_t offset[kDecodeBc];
  std::int64_t scale_offset[kDecodeBc];
};

// Requests lines into L2 in address order over the segments of one block's rows of one tensor (K or V): runs
// of keys whose rows are adjacent, each run one segment across every head where a key's heads fill its row,
// else one per head. Issue(n) requests the next n lines; past the last segment it does nothing.
class LineRequests {
 public:
  // The next block of `rows` from `base` (elements of `element_bytes`): row span `row_elements` per head,
  // `heads` heads head_stride apart, rows seq_stride apart in the cache.
  void Plan(const void* base, std::int64_t element_bytes, const BlockRows& rows, std::int64_t heads,
            std::int64_t head_stride, std::int64_t row_elements, std::int64_t seq_stride);
  void Issue(std::int64_t lines) {
    if (lines <= left_) {  // within the segment: the common case, unrolled where `lines` is a constant
      for (std::int64_t line = 0; line < lines; ++line) PrefetchLine(next_ + 64 * line);
      next_ += 64 * lines;
      left_ -= lines;
      return;
    }
    IssueAcrossSegments(lines);
  }

 private:
  bool NextSegment();
  void IssueAcrossSegments(std::int64_t lines) {
    for (; lines > 0; --lines) {
      if (left_ == 0 && !NextSegment()) return;
      PrefetchLine(next_);
      next_ += 64;
      --left_;
    }
  }

  const char* base_ = nullptr;
  std::int64_t run_start_[kDecodeBc + 1] = {}, runs_ = 0, run_ = 0;
  std::int64_t head_ = 0, heads_per_run_ = 1;  // segments per run: 1 where a key's heads fill its row
  // A run of k keys spans (k - 1)·seq_stride_ elements + key_bytes_ from its first key's row.
  std::int64_t seq_stride_ = 0, key_bytes_ = 0, head_bytes_ = 0;
  const std::int64_t* offset_ = nullptr;
  std::int64_t element_bytes_ = 1;
  const char* next_ = nullptr;
  std::int64_t left_ = 0;  // lines of the segment from next_ on
};

inline void LineRequests::Plan(const void* base, std::int64_t element_bytes, const BlockRows& rows,
                               std::int64_t heads, std::int64_t head_stride, std::int64_t row_elements,
                               std::int64_t seq_stride) {
  base_ = static_cast<const char*>(base);
  element_bytes_ = element_bytes;
  offset_ = rows.offset;
  // A key's heads fill its row: one segment per run across them; else one per (run, head), whose rows are
  // adjacent only where the cache holds a head's rows one after another (seq_stride = row_elements). A stride
  // enters a product only where it separates real rows: a single key, or a single head, may carry any stride.
  std::int64_t heads_span = 0;
  const bool heads_fill_rows = !__builtin_mul_overflow(heads, head_stride, &heads_span) &&
                               seq_stride == heads_span && (heads == 1 || head_stride > 0);
  heads_per_run_ = heads_fill_rows ? 1 : heads;
  head_bytes_ = heads_per_run_ > 1 ? head_stride * element_bytes : 0;
  seq_stride_ = seq_stride;
  key_bytes_ = ((heads_fill_rows ? (heads - 1) * head_stride : 0) + row_elements) * element_bytes;
  runs_ = 0;
  const bool adjacent_rows = seq_stride > 0 && (heads_fill_rows || seq_stride == row_elements);
  for (std::int64_t c = 0; c < rows.cols; ++c) {
    if (c == 0 || !adjacent_rows || rows.offset[c] - rows.offset[c - 1] != seq_stride) run_start_[runs_++] = c;
  }
  run_start_[runs_] = rows.cols;
  run_ = 0, head_ = 0;
  next_ = nullptr, left_ = 0;
  if (runs_ > 0) {
    run_ = -1, head_ = heads_per_run_ - 1;  // NextSegment moves to run 0, head 0
    NextSegment();
  }
}

inline bool LineRequests::NextSegment() {
  if (run_ >= runs_) return false;  // no rows planned, or all requested
  if (++head_ == heads_per_run_) {
    head_ = 0;
    if (++run_ >= runs_) {
      next_ = nullptr, left_ = 0;
      return false;
    }
  }
  const std::int64_t first = run_start_[run_], keys = run_start_[run_ + 1] - first;
  const auto begin = reinterpret_cast<std::uintptr_t>(base_ + offset_[first] * element_bytes_ + head_ * head_bytes_);
  const std::int64_t span = (keys > 1 ? (keys - 1) * seq_stride_ * element_bytes_ : 0) + key_bytes_;
  const std::uintptr_t end = begin + static_cast<std::uintptr_t>(span);
  next_ = reinterpret_cast<const char*>(begin / 64 * 64);
  left_ = static_cast<std::int64_t>((end + 63) / 64 - begin / 64);
  return true;
}


// The blocks of one chunk (ChunkTask), kDecodeBc keys each, in order: this block's rows, and the requests for
// the next block's K and V lines, which the steps issue as they read this block's. A quantized cache's scales
// of the next block's keys are requested all at once as it is planned, when there are several per key (groups:
// one scale per row is a few bytes a key, read no faster with requests).
class ReadPlan {
 public:
  ReadPlan(const ChunkTask& t, std::int64_t element_bytes) : t_(t), element_bytes_(element_bytes) {
    Locate(t.j_begin, block_);
    Locate(t.j_begin + kDecodeBc, next_);
    PlanRequests();
  }
  bool Done() const { return block_->cols == 0; }
  const BlockRows& Block() const { return *block_; }
  LineRequests& NextKeys() { return next_k_; }
  LineRequests& NextValues() { return next_v_; }
  void Advance() {
    std::swap(block_, next_);
    Locate(block_->j0 + kDecodeBc, next_);
    PlanRequests();
  }

 private:
  void Locate(std::int64_t j0, BlockRows* rows) const;
  void PlanRequests();

  const ChunkTask& t_;
  const std::int64_t element_bytes_;
  BlockRows rows_[2];
  BlockRows* block_ = &rows_[0];
  BlockRows* next_ = &rows_[1];
  LineRequests next_k_, next_v_;
};

// offset[c] of key j0 + c at position j (j0 + c, or the selected keys' positions[j0 + c]): contiguous,
// j·seq_stride; paged, page pages[j / page_size], slot j mod page_size (likewise the scales with their strides).
// The selection and paged tests are made once per block, not per key.
inline void ReadPlan::Locate(std::int64_t j0, BlockRows* rows) const {
  const KvSource& kv = t_.kv;
  const KvScales& scales = t_.scales;
  rows->j0 = j0;
  rows->cols = std::clamp<std::int64_t>(t_.j_end - j0, 0, kDecodeBc);
  const std::int64_t n = rows->cols;
  if (n == 0) return;
  std::int64_t j[kDecodeBc];
  if (t_.positions == nullptr) {
    for (std::int64_t c = 0; c < n; ++c) j[c] = j0 + c;
  } else {
    for (std::int64_t c = 0; c < n; ++c) j[c] = t_.positions[j0 + c];
  }
  if (kv.page_size == 0) {
    for (std::int64_t c = 0; c < n; ++c) {
      rows->offset[c] = j[c] * kv.seq_stride;
      rows->scale_offset[c] = j[c] * scales.seq_stride;
    }
  } else {
    for (std::int64_t c = 0; c < n; ++c) {
      const std::int64_t page = kv.pages[j[c] / kv.page_size], slot = j[c] % kv.page_size;
      rows->offset[c] = page * kv.page_stride + slot * kv.seq_stride;
      rows->scale_offset[c] = page * scales.page_stride + slot * scales.seq_stride;
    }
  }
  std::fill(rows->offset + n, rows->offset + kDecodeBc, rows->offset[0]);
  std::fill(rows->scale_offset + n, rows->scale_offset + kDecodeBc, rows->scale_offset[0]);
}

inline void ReadPlan::PlanRequests() {
  const KvSource& kv = t_.kv;
  const BlockRows& next = *next_;
  next_k_.Plan(kv.k, element_bytes_, next, t_.heads, t_.head_stride, t_.d, kv.seq_stride);
  // V inside the K rows: its lines come with K's
  static const BlockRows kNoRows{};
  next_v_.Plan(kv.v, element_bytes_, kv.v == kv.k ? kNoRows : next, t_.heads, t_.head_stride, t_.dv, kv.seq_stride);
  const KvScales& scales = t_.scales;
  if (scales.k == nullptr || scales.seq_stride == 0 || scales.group_size == t_.d) return;
  const std::int64_t key_floats = (t_.heads - 1) * scales.head_stride + t_.d / scales.group_size;
  for (const float* base : {scales.k, scales.v}) {
    const char* last_line = nullptr;
    for (std::int64_t c = 0; c < next.cols; ++c) {
      const auto* begin = reinterpret_cast<const char*>(base + next.scale_offset[c]);
      const auto* end = reinterpret_cast<const char*>(base + next.scale_offset[c] + key_floats);
      const char* line = begin - reinterpret_cast<std::uintptr_t>(begin) % 64;
      if (line == last_line) line += 64;
      for (; line < end; line += 64) PrefetchLine(last_line = line);
    }
  }
}

}  // namespace flashattn::decode_kernel

#endif  // FLASHATTN_DECODE_READ_PLAN_H_
