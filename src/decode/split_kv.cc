#include "decode/decode.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "common/element.h"
#include "common/quantize.h"
#include "common/rotary.h"
#include "decode/merge.h"

namespace flashattn::decode_kernel {

namespace {

int ThreadsOf(int requested) { return requested > 0 ? requested : omp_get_max_threads(); }

// Step 2: the new keys and values into the cache (in place). When the cache holds q's float type and no
// rotary applies, the bytes are copied unchanged; otherwise the rows are read as float32, the keys rotated,
// and both stored in the cache's element type (rounded, or quantized with their scales). Values inside the
// keys are written with them, as part of the K row.
void AppendNewKeys(const DecodeParams& p) {
  const std::int64_t d = p.head_dim, dv = p.value_head_dim(), elem = CacheElementBytes(p);
  const bool copy = !Quantized(p.cache_element) && p.cache_dtype == p.dtype;
  const Strides scale_strides = ScaleStridesOf(p);
  std::vector<float> k_row(static_cast<std::size_t>(d)), v_row(static_cast<std::size_t>(dv));
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t i = 0; i < p.new_rows(b); ++i)
      for (std::int64_t hk = 0; hk < p.heads_kv; ++hk) {
        const std::int64_t j = p.cache_seqlens[b] + i;
        const std::int64_t src = p.row_offset(p.new_strides, b, i, hk);
        const std::int64_t dst = CacheRowOffset(p, p.cache_strides, b, j, hk);
        const std::int64_t scale_row = CacheRowOffset(p, scale_strides, b, j, hk);
        if (!p.values_in_keys()) {
          if (copy) {
            std::memcpy(static_cast<char*>(p.v_cache) + dst * elem, static_cast<const char*>(p.v_new) + src * elem,
                        dv * elem);
          } else {
            for (std::int64_t e = 0; e < dv; ++e) v_row[e] = LoadAsFloat(p.v_new, p.dtype, src + e);
            StoreCacheRow(p, p.v_cache, p.v_scale == nullptr ? nullptr : p.v_scale + scale_row, dst, v_row.data(),
                          dv);
          }
        }
        if (copy && p.rotary_dim == 0) {
          std::memcpy(static_cast<char*>(p.k_cache) + dst * elem, static_cast<const char*>(p.k_new) + src * elem,
                      d * elem);
          continue;
        }
        for (std::int64_t e = 0; e < d; ++e) k_row[e] = LoadAsFloat(p.k_new, p.dtype, src + e);
        if (p.rotary_dim > 0) {
          const std::int64_t pos = j * (p.rotary_dim / 2);
          ApplyRotary(k_row.data(), p.rotary_dim, p.rotary_cos + pos, p.rotary_sin + pos, p.rotary_interleaved);
        }
        StoreCacheRow(p, p.k_cache, p.k_scale == nullptr ? nullptr : p.k_scale + scale_row, dst, k_row.data(), d);
      }
}

}  // namespace

std::vector<SplitKv::RowGroup> SplitKv::PlanRowGroups(const DecodeParams& p, const KernelSequences& sequences) {
  std::vector<RowGroup> groups;
  // A sequence of (batch, seqlen_q) queries is one group, its rows however many; packed rows come in blocks;
  // with selected keys each row has keys of its own.
  const std::int64_t block =
      RowLists(p)            ? 1
      : p.packed()           ? std::max<std::int64_t>(1, kPackedRowsPerGroup / (p.heads_q / p.heads_kv))
                             : p.seqlen_q;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    if (!sequences.Attends(b)) continue;
    for (std::int64_t i0 = 0; i0 < p.query_rows(b); i0 += block) {
      RowGroup rows;
      rows.b = b, rows.i0 = i0, rows.Nq = std::min(block, p.query_rows(b) - i0);
      groups.push_back(std::move(rows));
    }
  }
  return groups;
}

SplitKv::SplitKv(const DecodeParams& p, const KernelSequences& sequences)
    : p_(p),
      band_(Band::Of(p)),
      groups_(PlanRowGroups(p, sequences)),
      R_(p.heads_q / p.heads_kv *
         std::accumulate(groups_.begin(), groups_.end(), std::int64_t{0},
                         [](std::int64_t most, const RowGroup& rows) { return std::max(most, rows.Nq); })),
      threads_(ThreadsOf(p.num_threads)),
      head_items_(RowLists(p) ? ListHeads(p) : 1) {
  std::int64_t max_keys = p.key_indices.count;
  for (std::int64_t b = 0; b < p.batch && !p.key_indices.active(); ++b) {
    max_keys = std::max<std::int64_t>(max_keys, p.cache_seqlens[b] + p.new_rows(b));
  }
  const auto groups = static_cast<std::int64_t>(groups_.size()) * head_items_;
  splits_ =
      std::max<std::int64_t>(1, p.num_splits == 0 ? choose_num_splits(groups, max_keys, threads_) : p.num_splits);
  items_ = groups * splits_;
  for (RowGroup& rows : groups_) {
    rows.partials = partial_rows_;
    partial_rows_ += splits_ * p.heads_q * rows.Nq;  // Hkv·R rows per chunk
  }
  const std::int64_t dv = p.value_head_dim();
  O_partial_.resize(static_cast<std::size_t>(partial_rows_ * dv));
  lse_partial_.resize(static_cast<std::size_t>(partial_rows_));
  o_row_.resize(static_cast<std::size_t>(dv));
}

void SplitKv::GatherRows(RowGroup& rows) const {
  const DecodeParams& p = p_;
  const std::int64_t b = rows.b, Nq = rows.Nq, d = p.head_dim, G = p.heads_q / p.heads_kv, R = G * Nq;
  const std::int64_t cached = p.cache_seqlens[b], Nk = cached + p.new_rows(b);
  const std::int64_t offset = DecodeDiagonalOffset(p, b, Nk) + rows.i0;  // local row i's diagonal is i + offset
  rows.Q.resize(p.heads_kv * R * d);
  rows.mods.reserve(p.heads_q);
  for (std::int64_t h = 0; h < p.heads_q; ++h) {
    rows.mods.emplace_back(p, b, h, Nk);
    rows.mods.back().offset = offset;
  }
  for (std::int64_t h = 0; h < p.heads_q; ++h)
    for (std::int64_t i = 0; i < Nq; ++i) {
      const std::int64_t r = (h % G) * Nq + i, row = (h / G) * R + r;
      float* q = &rows.Q[row * d];
      const std::int64_t src = p.row_offset(p.q_strides, b, rows.i0 + i, h);
      for (std::int64_t e = 0; e < d; ++e) q[e] = LoadAsFloat(p.q, p.dtype, src + e);
      if (p.rotary_dim > 0) {  // rotated at position cache_seqlens[b] (+ i), rounded as if stored in dtype
        const std::int64_t at = p.rotary_queries_at_cache_end ? 0 : rows.i0 + i;
        const std::int64_t pos = (cached + at) * (p.rotary_dim / 2);
        ApplyRotary(q, p.rotary_dim, p.rotary_cos + pos, p.rotary_sin + pos, p.rotary_interleaved);
        for (std::int64_t e = 0; e < d; ++e) q[e] = RoundTo(p.dtype, q[e]);
      }
    }
  const IndexRange keys = band_.KeysOfDiagonals(offset, offset + Nq - 1, Nk);
  rows.j_begin = keys.begin, rows.j_end = keys.end;
  if (p.key_indices.active()) SelectKeys(rows);
  if (p.block_mask.active() || p.document_ids != nullptr) MaskKeys(rows);
}

// The row's list of each K/V head, −1 dropped and sorted, so that the cache is read in address order. Every
// position is one the row sees (validated): the band has nothing left to hide.
void SplitKv::SelectKeys(RowGroup& rows) const {
  const KeySelection& s = p_.key_indices;
  const std::int64_t row = p_.packed() ? p_.cu_seqlens_q[rows.b] + rows.i0 : rows.b * p_.seqlen_q + rows.i0;
  rows.list_stride = s.count;
  rows.selected.resize(static_cast<std::size_t>(p_.heads_kv * s.count));
  rows.selected_count.resize(static_cast<std::size_t>(p_.heads_kv));
  for (std::int64_t hk = 0; hk < p_.heads_kv; ++hk) {
    const std::int32_t* list = s.indices + (row * p_.heads_kv + hk) * s.count;
    std::int32_t* out = rows.selected.data() + hk * s.count;
    std::int32_t* end = std::copy_if(list, list + s.count, out, [](std::int32_t j) { return j >= 0; });
    std::sort(out, end);
    rows.selected_count[static_cast<std::size_t>(hk)] = end - out;
  }
  UnbandedRows(rows);
}

// The positions the row (rows.i0, a group of one row) sees under the block mask and the document ids, of each
// list, ascending: the keys of its partial blocks on its band and in its document, its full blocks whole;
// without a block mask, the keys of its band in its document.
void SplitKv::MaskKeys(RowGroup& rows) const {
  const DecodeParams& p = p_;
  const BlockMask& m = p.block_mask;
  const std::int64_t b = rows.b, i = rows.i0, Nk = p.cache_seqlens[b] + p.new_rows(b), lists = ListHeads(p);
  const std::int64_t diagonal = rows.mods[0].Diagonal(0);
  const IndexRange band = band_.KeysOfDiagonals(diagonal, diagonal, Nk);
  const std::int64_t doc_stride = p.document_ids_batch_stride != 0 ? p.document_ids_batch_stride
                                  : p.paged()                      ? p.max_pages * p.page_size
                                                                   : p.cache_seqlen_max;
  const std::int32_t* docs = p.document_ids == nullptr ? nullptr : p.document_ids + b * doc_stride;
  const std::int32_t doc = docs == nullptr ? 0 : docs[i + Nk - p.seqlen_q];  // the row's own position's
  const auto sees = [&](std::int64_t j) {
    return j >= band.begin && j < band.end && (docs == nullptr || docs[j] == doc);
  };
  const std::int64_t Tq = (p.seqlen_q + m.block_size_q - 1) / m.block_size_q;
  // A mask with one list for every head gives each of them list 0's positions, stored once (stride 0).
  const std::int64_t distinct = m.active() && m.heads != 1 ? lists : 1;
  rows.list_stride = distinct > 1 ? Nk : 0;
  rows.selected.resize(static_cast<std::size_t>(distinct * Nk));
  rows.selected_count.resize(static_cast<std::size_t>(lists));
  for (std::int64_t l = 0; l < distinct; ++l) {
    std::int32_t* out = rows.selected.data() + l * Nk;
    std::int32_t* end = out;
    if (!m.active()) {
      for (std::int64_t j = band.begin; j < band.end; ++j)
        if (sees(j)) *end++ = static_cast<std::int32_t>(j);
    } else {
      const std::int64_t list = (b * m.heads + (m.heads == 1 ? 0 : l)) * Tq + i / m.block_size_q;
      const auto add = [&](const std::int32_t* num, const std::int32_t* indices, std::int64_t width, bool full) {
        if (num == nullptr) return;
        for (std::int32_t e = 0; e < num[list]; ++e) {
          const std::int64_t c = indices[list * width + e];
          for (std::int64_t j = c * m.block_size_k; j < std::min(Nk, (c + 1) * m.block_size_k); ++j)
            if (full || sees(j)) *end++ = static_cast<std::int32_t>(j);
        }
      };
      add(m.kv_num_blocks, m.kv_indices, m.kv_width, false);
      add(m.full_kv_num_blocks, m.full_kv_indices, m.full_kv_width, true);
      std::sort(out, end);
    }
    rows.selected_count[static_cast<std::size_t>(l)] = end - out;
  }
  std::fill(rows.selected_count.begin() + distinct, rows.selected_count.end(), rows.selected_count[0]);
  UnbandedRows(rows);
}

// Every listed position is one the row sees: the band has nothing left to hide, and ALiBi's distances are the
// positions' own (ChunkTask::alibi).
void SplitKv::UnbandedRows(RowGroup& rows) const {
  for (ScoreModifiers& mods : rows.mods) mods.band = Band{};
  if (p_.alibi_slopes == nullptr) return;
  for (ScoreModifiers& mods : rows.mods) rows.alibi.push_back(mods.alibi_slope), mods.alibi_slope = 0.0f;
}

bool SplitKv::AppendAndGather() {
  AppendNewKeys(p_);
  if (partial_rows_ == 0) return false;  // no query rows (seqlen_q = 0, or no packed rows)
  const auto groups = static_cast<std::int64_t>(groups_.size());
#pragma omp parallel for num_threads(threads_) schedule(dynamic, 16) if (groups > 16)
  for (std::int64_t g = 0; g < groups; ++g) GatherRows(groups_[static_cast<std::size_t>(g)]);
  return true;
}

namespace {

// `elements` of `bytes` each past base; null stays null (an empty cache may be null, and has no keys).
const void* Advanced(const void* base, std::int64_t elements, std::int64_t bytes) {
  return base == nullptr ? nullptr : static_cast<const char*>(base) + elements * bytes;
}
const float* Advanced(const float* base, std::int64_t elements) { return base == nullptr ? nullptr : base + elements; }

}  // namespace

ChunkTask SplitKv::Task(std::int64_t item) {
  const DecodeParams& p = p_;
  const RowGroup& rows = groups_[item / (splits_ * head_items_)];
  // The heads of the item: every K/V head, or with row lists list l's query heads h0 ... h0 + G_l − 1 (those of
  // K/V head l, or query head l alone), of K/V head hk0, over the list's positions.
  const bool lists = RowLists(p);
  const std::int64_t l = lists ? item / splits_ % head_items_ : 0;
  const std::int64_t G_l = lists ? p.heads_q / head_items_ : p.heads_q / p.heads_kv, h0 = l * G_l;
  const std::int64_t hk0 = h0 / (p.heads_q / p.heads_kv);
  const std::int64_t b = rows.b, s = item % splits_;
  const std::int64_t j_begin = lists ? 0 : rows.j_begin;
  const std::int64_t j_end = lists ? rows.selected_count[static_cast<std::size_t>(l)] : rows.j_end;
  const std::int64_t chunk = (j_end - j_begin + splits_ - 1) / splits_;
  ChunkTask task;
  task.heads = lists ? 1 : p.heads_kv;
  task.G = G_l;
  task.head_stride = p.cache_strides.head;
  task.R = task.G * rows.Nq;
  task.d = p.head_dim;
  task.dv = p.value_head_dim();
  task.Nq = rows.Nq;
  task.Q = rows.Q.data() + h0 * rows.Nq * task.d;  // query head h's rows start at row h·Nq
  task.mods = rows.mods.data() + h0;
  task.j_begin = std::min(j_end, j_begin + s * chunk);
  task.j_end = std::min(j_end, task.j_begin + chunk);
  if (lists) task.positions = rows.selected.data() + l * rows.list_stride;
  if (!rows.alibi.empty()) task.alibi = rows.alibi.data() + h0;
  task.integer_scores = p.quantize_query_int8;
  task.integer_pv = p.quantize_probs_u8;
  const Strides scale_strides = ScaleStridesOf(p);
  task.scales.head_stride = scale_strides.head;
  task.scales.group_size = ScaleGroupSize(p.scale_group_size, p.head_dim);
  // The rows of K/V head hk0 of sequence b (of its pages when paged), and their scales.
  const std::int64_t bytes = CacheElementBytes(p);
  const std::int64_t sequence = p.paged() ? 0 : b * p.cache_strides.batch;
  const std::int64_t at = sequence + hk0 * p.cache_strides.head;
  const std::int64_t scales_at = (p.paged() ? 0 : b * scale_strides.batch) + hk0 * scale_strides.head;
  task.kv = {Advanced(p.k_cache, at, bytes), Advanced(p.v_cache, at, bytes), p.cache_strides.seq, 0, 0, nullptr};
  task.scales.k = Advanced(p.k_scale, scales_at), task.scales.v = Advanced(p.value_scales(), scales_at);
  task.scales.seq_stride = scale_strides.seq;
  if (p.paged()) {
    task.kv.page_stride = p.cache_strides.batch, task.kv.page_size = p.page_size;
    task.kv.pages = p.block_table + b * p.block_table_stride;
    task.scales.page_stride = scale_strides.batch;
  }
  const std::int64_t first = rows.partials + (s * p.heads_q + h0) * rows.Nq;  // Hq·Nq rows per chunk
  task.O = O_partial_.data() + first * task.dv;
  task.lse = lse_partial_.data() + first;
  return task;
}

void SplitKv::Merge() {
  const DecodeParams& p = p_;
  const std::int64_t dv = p.value_head_dim(), G = p.heads_q / p.heads_kv;
  // Partials of row (hk, r) of a row group sit Hkv·R rows apart: O at partials + s·Hkv·R + hk·R + r rows of dv.
  for (const RowGroup& rows : groups_) {
    const std::int64_t Nq = rows.Nq, R = G * Nq, stride = p.heads_kv * R;
    for (std::int64_t row = 0; row < stride; ++row) {
      const std::int64_t first = rows.partials + row;
      const std::int64_t hk = row / R, g = row % R / Nq, i = rows.i0 + row % Nq, h = hk * G + g;
      const float lse = MergeRow(splits_, &O_partial_[first * dv], stride * dv, &lse_partial_[first], stride, dv,
                                 o_row_.data(), SinkOf(p, h));
      const std::int64_t dst = p.row_offset(p.o_strides, rows.b, i, h);
      for (std::int64_t e = 0; e < dv; ++e) StoreFromFloat(p.o, p.dtype, dst + e, o_row_[e]);
      if (p.lse != nullptr) p.lse[p.lse_index(rows.b, h, i)] = lse;
    }
  }
}

}  // namespace flashattn::decode_kernel
