// decode(): Flash-Decoding over a KV cache (SPEC §4), flash_attn_with_kvcache semantics.
//   1. Validate everything, including the block table, before anything is written.
//   2. Append: k_new (rotated) and v_new go into the cache at positions cache_seqlens[b] + i.
//   3. Per sequence b and K/V head: gather its R = (Hq/Hkv)·Nq query rows (rotated, rounded to dtype) into
//      one float32 tile, so each K/V byte is read once for all of them.
//   4. Split the keys the rows can see into chunks; every (b, chunk) is one parallel work item (AttendChunk,
//      all K/V heads, so the cache is read in address order) that leaves partials (O_k, LSE_k) in scratch.
//   5. Merge each row's partials by LSE (MergeRow, the operation of merge_attention_states) into O and LSE.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "common/element.h"
#include "decode/attend.h"
#include "decode/merge.h"
#include "common/rotary.h"
#include "common/score.h"
#include "flashattn/decode.h"

namespace flashattn {

namespace {

int Threads(int requested) { return requested > 0 ? requested : omp_get_max_threads(); }

std::int64_t ElementBytes(const DecodeParams& p) { return static_cast<std::int64_t>(SizeOf(p.dtype)); }

// Element offset of cache row (sequence b, key position j, K/V head hk).
std::int64_t CacheOffset(const DecodeParams& p, std::int64_t b, std::int64_t j, std::int64_t hk) {
  const Strides& s = p.cache_strides;
  if (!p.Paged()) return b * s.batch + j * s.seq + hk * s.head;
  const std::int64_t page = p.block_table[b * p.block_table_stride + j / p.page_size];
  return page * s.batch + (j % p.page_size) * s.seq + hk * s.head;
}

// Step 2: the new keys and values into the cache (in place). Rotary keys are rotated in float32 and
// rounded to the cache type; otherwise the bytes are copied unchanged.
void AppendNewKeys(const DecodeParams& p) {
  const std::int64_t d = p.head_dim, elem = ElementBytes(p);
  std::vector<float> k_row(static_cast<std::size_t>(d));
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t i = 0; i < p.seqlen_new; ++i)
      for (std::int64_t hk = 0; hk < p.heads_kv; ++hk) {
        const std::int64_t j = p.cache_seqlens[b] + i;
        const std::int64_t src = b * p.new_strides.batch + i * p.new_strides.seq + hk * p.new_strides.head;
        const std::int64_t dst = CacheOffset(p, b, j, hk);
        std::memcpy(static_cast<char*>(p.v_cache) + dst * elem, static_cast<const char*>(p.v_new) + src * elem,
                    d * elem);
        if (p.rotary_dim == 0) {
          std::memcpy(static_cast<char*>(p.k_cache) + dst * elem, static_cast<const char*>(p.k_new) + src * elem,
                      d * elem);
          continue;
        }
        for (std::int64_t e = 0; e < d; ++e) k_row[e] = LoadAsFloat(p.k_new, p.dtype, src + e);
        const std::int64_t pos = j * (p.rotary_dim / 2);
        ApplyRotary(k_row.data(), p.rotary_dim, p.rotary_cos + pos, p.rotary_sin + pos,
                            p.rotary_interleaved);
        for (std::int64_t e = 0; e < d; ++e) StoreFromFloat(p.k_cache, p.dtype, dst + e, k_row[e]);
      }
}

// The query rows of one sequence: row r = g·Nq + i of K/V head hk is query i of head hk·G + g, stored at
// (hk·R + r) of Q and slope.
struct RowGroup {
  std::vector<float> Q;  // Hkv·R×d
  std::vector<std::int64_t> diagonal;  // per r: the same for every head
  std::vector<float> slope;  // Hkv·R
  std::int64_t j_begin = 0, j_end = 0;  // the keys any row may see
};

RowGroup GatherRows(const DecodeParams& p, const Band& band, std::int64_t b) {
  const std::int64_t Nq = p.seqlen_q, d = p.head_dim, G = p.heads_q / p.heads_kv, R = G * Nq;
  const std::int64_t cached = p.cache_seqlens[b], Nk = cached + p.seqlen_new;
  RowGroup rows;
  rows.Q.resize(p.heads_kv * R * d);
  rows.diagonal.resize(R);
  rows.slope.resize(p.heads_kv * R);
  for (std::int64_t h = 0; h < p.heads_q; ++h)
    for (std::int64_t i = 0; i < Nq; ++i) {
      const std::int64_t r = (h % G) * Nq + i, row = (h / G) * R + r;
      float* q = &rows.Q[row * d];
      const std::int64_t src = b * p.q_strides.batch + i * p.q_strides.seq + h * p.q_strides.head;
      for (std::int64_t e = 0; e < d; ++e) q[e] = LoadAsFloat(p.q, p.dtype, src + e);
      if (p.rotary_dim > 0) {  // rotated at position cache_seqlens[b] + i, rounded as if stored in dtype
        const std::int64_t pos = (cached + i) * (p.rotary_dim / 2);
        ApplyRotary(q, p.rotary_dim, p.rotary_cos + pos, p.rotary_sin + pos, p.rotary_interleaved);
        for (std::int64_t e = 0; e < d; ++e) q[e] = RoundTo(p.dtype, q[e]);
      }
      rows.diagonal[r] = i + Nk - Nq;
      rows.slope[row] = AlibiSlope(p, b, h);
    }
  const IndexRange keys = band.KeysOfDiagonals(Nk - Nq, Nk - 1, Nk);
  rows.j_begin = keys.begin, rows.j_end = keys.end;
  return rows;
}

}  // namespace

std::int64_t ChooseNumSplits(std::int64_t batch, std::int64_t max_seqlen_k, int num_threads) {
  constexpr std::int64_t kMinChunk = 512;  // keys; below this the merge and the scheduling start to show
  const std::int64_t items = std::max<std::int64_t>(1, batch);
  const std::int64_t wanted = 2 * static_cast<std::int64_t>(Threads(num_threads));  // items to keep all busy
  if (items >= wanted) return 1;
  const std::int64_t splits = (wanted + items - 1) / items;
  return std::clamp<std::int64_t>(std::min(splits, max_seqlen_k / kMinChunk), 1, splits);
}

void DecodeParams::SetContiguousStrides() {
  const std::int64_t d = head_dim;
  q_strides = {seqlen_q * heads_q * d, heads_q * d, d};
  new_strides = {seqlen_new * heads_kv * d, heads_kv * d, d};
  o_strides = {seqlen_q * heads_q * d, heads_q * d, d};
  const std::int64_t rows = Paged() ? page_size : cache_seqlen_max;
  cache_strides = {rows * heads_kv * d, heads_kv * d, d};
}

void decode(const DecodeParams& p) {
  Validate(p);
  const std::int64_t d = p.head_dim, Nq = p.seqlen_q, Hkv = p.heads_kv, G = p.heads_q / Hkv, R = G * Nq;
  const int threads = Threads(p.num_threads);
  const Band band = Band::Of(p);
  const float scale = SoftmaxScale(p);

  // Everything that can fail to allocate is obtained before the cache is touched.
  std::vector<RowGroup> groups(static_cast<std::size_t>(p.batch));
  std::int64_t max_keys = 0;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    max_keys = std::max<std::int64_t>(max_keys, p.cache_seqlens[b] + p.seqlen_new);
  }
  const std::int64_t splits =
      std::max<std::int64_t>(1, p.num_splits == 0 ? ChooseNumSplits(p.batch, max_keys, threads) : p.num_splits);
  const std::int64_t items = p.batch * splits, rows_per_item = Hkv * R;
  std::vector<float> O_partial(static_cast<std::size_t>(items * rows_per_item * d));
  std::vector<float> lse_partial(static_cast<std::size_t>(items * rows_per_item));
  const std::int64_t scratch_floats = decoding::AttendScratch::Floats(Hkv, R, d);
  std::vector<float> scratch(static_cast<std::size_t>(threads * scratch_floats));
  std::vector<float> o_row(static_cast<std::size_t>(d));

  AppendNewKeys(p);
  if (rows_per_item == 0) return;  // no query rows (seqlen_q = 0): the append was the whole call
  for (std::int64_t b = 0; b < p.batch; ++b) groups[b] = GatherRows(p, band, b);

  const std::int64_t elem = ElementBytes(p);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (std::int64_t item = 0; item < items; ++item) {
    const std::int64_t b = item / splits, s = item % splits;
    const RowGroup& rows = groups[b];
    const std::int64_t chunk = (rows.j_end - rows.j_begin + splits - 1) / splits;
    decoding::ChunkTask task;
    task.Q = rows.Q.data();
    task.heads = Hkv;
    task.head_stride = p.cache_strides.head;
    task.R = R;
    task.d = d;
    task.diagonal = rows.diagonal.data();
    task.slope = rows.slope.data();
    task.band = band;
    task.scale = scale;
    task.softcap = p.softcap;
    task.dtype = p.dtype;
    task.j_begin = std::min(rows.j_end, rows.j_begin + s * chunk);
    task.j_end = std::min(rows.j_end, task.j_begin + chunk);
    if (p.Paged()) {
      task.kv = {p.k_cache, p.v_cache, p.cache_strides.seq, p.cache_strides.batch, p.page_size,
                 p.block_table + b * p.block_table_stride};
    } else {
      // An empty cache (cache_seqlen_max = 0) may be null; no offset on null (undefined), and no keys.
      const std::int64_t sequence_offset = b * p.cache_strides.batch * elem;
      const auto sequence_b = [&](const void* cache) {
        return cache == nullptr ? nullptr : static_cast<const char*>(cache) + sequence_offset;
      };
      task.kv = {sequence_b(p.k_cache), sequence_b(p.v_cache), p.cache_strides.seq, 0, 0, nullptr};
    }
    // data() + offset: with no query rows the vectors are empty and operator[] would be out of range.
    task.O = O_partial.data() + item * rows_per_item * d;
    task.lse = lse_partial.data() + item * rows_per_item;
    decoding::AttendChunk(task, scratch.data() + omp_get_thread_num() * scratch_floats);
  }

  // Partials of row (hk, r) of sequence b sit splits apart: O at (b·splits + s)·Hkv·R + hk·R + r rows of d.
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t row = 0; row < rows_per_item; ++row) {
      const std::int64_t first = b * splits * rows_per_item + row;
      const float lse = decoding::MergeRow(splits, &O_partial[first * d], rows_per_item * d, &lse_partial[first],
                                           rows_per_item, d, o_row.data());
      const std::int64_t hk = row / R, g = row % R / Nq, i = row % Nq, h = hk * G + g;
      const std::int64_t dst = b * p.o_strides.batch + i * p.o_strides.seq + h * p.o_strides.head;
      for (std::int64_t e = 0; e < d; ++e) StoreFromFloat(p.o, p.dtype, dst + e, o_row[e]);
      if (p.lse != nullptr) p.lse[(b * p.heads_q + h) * Nq + i] = lse;
    }
}

}  // namespace flashattn
