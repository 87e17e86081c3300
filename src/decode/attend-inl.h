// AttendChunk per Highway target: FlashAttention-2's inner loop over blocks of Bc keys, for the R query
// rows that share one K/V head, for every K/V head within each block (docs/algorithms.md):
//   S_j = Score(Q K_jᵀ)                                  R×Bc, ScoreBlock (attend_tiles-inl.h), all heads
//   m_new = max(m, rowmax S_j),  P̃_j = e^{S_j − m_new}    OnlineSoftmaxRow (simd/online_softmax-inl.h)
//   l = e^{m − m_new} l + rowsum P̃_j,  Õ = e^{m − m_new} Õ + P̃_j V_j   (AccumulateBlock)
//   O = Õ / l,  LSE = m + log l                           NormalizeAndLse
// then, head after head, the softmax and the accumulation. Each K and V row is read from main memory once:
// straight into the register tiles when d fills whole vectors (further row tiles find it in L1), else
// widened once into zero-padded float32 rows. The software prefetches are described at AttendChunk.
// A quantized cache (int8, FP8) with one scale per row is read straight too, its scales applied per
// key: S_j = scale_k[j]·(q·k_j) after the dot product, and P̃_j·scale_v[j] before the accumulation of V
// (l sums the unscaled P̃_j). With scales per group of features its rows are scaled group by group as the
// tiles load them (groups of whole vectors or of half a vector) or else dequantized as they are widened.
// An int8 cache may take integer dot products instead, for the scores (integer_scores-inl.h) and for P̃_j V_j
// (integer_pv-inl.h), each an option that rounds one more operand to 8 bits.
#if defined(FLASHATTN_DECODE_ATTEND_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_DECODE_ATTEND_INL_H_
#undef FLASHATTN_DECODE_ATTEND_INL_H_
#else
#define FLASHATTN_DECODE_ATTEND_INL_H_
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <type_traits>
#include <utility>

#include "common/constants.h"
#include "common/prefetch.h"
#include "common/score.h"
#include "decode/attend.h"
#include "decode/attend_tiles-inl.h"
#include "decode/integer_pv-inl.h"
#include "decode/integer_scores-inl.h"
#include "hwy/highway.h"
#include "simd/convert-inl.h"
#include "simd/online_softmax-inl.h"
#include "simd/scratch.h"
#include "simd/seen_pairs-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE::decode_kernel {
using flashattn::decode_kernel::ChunkTask;
using flashattn::decode_kernel::KvScales;
using flashattn::decode_kernel::KvSource;

// The float32 working set of one AttendChunk call for `heads` K/V heads of R rows: Q and the widened K block
// in rows of d_pad floats (copied, zero-padded), the widened V block and Õ in rows of dv_pad, scores, m, l, α;
// with integer scores (query_groups > 0 groups of features per row), Q quantized; with integer P̃ V, its
// rounded weights and sums.
struct AttendScratch {
  float* Q;      // heads·R rows
  float* K;      // kBc rows
  float* V;      // kBc rows
  float* S;      // heads·R × kBc scores, then P̃
  float* O;      // heads·R rows, the unnormalized Õ
  float* m;      // heads·R running maxima
  float* l;      // heads·R running sums
  float* alpha;  // R rescale factors of the current block
  QueryInt8 q_int8;
  IntegerPv pv;

  static AttendScratch Carve(simd::ScratchCarver& c, std::int64_t heads, std::int64_t R, std::int64_t d_pad,
                             std::int64_t dv_pad, std::int64_t query_groups, bool integer_pv) {
    const std::int64_t rows = heads * R;
    AttendScratch x;
    x.Q = c.Take<float>(rows * d_pad);
    x.K = c.Take<float>(kBc * d_pad);
    x.V = c.Take<float>(kBc * dv_pad);
    x.S = c.Take<float>(rows * kBc);
    x.O = c.Take<float>(rows * dv_pad);
    x.m = c.Take<float>(rows);
    x.l = c.Take<float>(rows);
    x.alpha = c.Take<float>(R);
    if (query_groups > 0) {
      x.q_int8.stride = QueryInt8Stride(d_pad);
      x.q_int8.groups = query_groups;
      x.q_int8.q = c.Take<std::int8_t>(rows * x.q_int8.stride);
      x.q_int8.scale = c.Take<float>(rows * query_groups);
      x.q_int8.offset = c.Take<std::int32_t>(rows * query_groups * kOffsetLanes);
#if HWY_TARGET == HWY_AVX3_DL
      // at most ⌈d_pad / groups / 16⌉ steps per group, of 64 bytes per block of rows
      const std::int64_t steps = StepsPerGroup((d_pad + query_groups - 1) / query_groups);
      x.q_int8.blocks = c.Take<std::int8_t>(heads * RowGroups(R) * query_groups * steps * 64);
#endif
    }
    if (integer_pv) {
      x.pv.u = c.Take<WeightCode>(R * kBc);
      x.pv.factor = c.Take<float>(R);
      if (!kIntegerPvReadsRawRows) x.pv.sum = c.Take<float>(R * dv_pad);
    }
    return x;
  }
};

// Whether any of the `cols` rows V[c] (`width` elements each, a multiple of Lanes) holds an inf or a NaN; never
// for an element type whose codes all read as finite values.
template <typename T>
bool HasNonFiniteRow(const T* const* V, std::int64_t cols, std::int64_t width) {
  if constexpr (!CacheElementTraits<T>::kMayHoldNonFinite) return false;
  for (std::int64_t c = 0; c < cols; ++c)
    if (HasNonFinite(V[c], width)) return true;
  return false;
}

// offset[c] for the kBc keys j + c of a block, with `n` ≤ kBc of them real: the element offset (K/V head 0) of
// key j + c's row in its sequence's cache, contiguous or through the pages (a tensor of rows seq_stride apart
// and pages page_stride apart: the cache, or its scales); keys past n repeat the first, so that pointers
// formed from every offset are readable. The paged test is made once per block, not once per key: with one
// K/V head nothing shares this per-block work.
HWY_INLINE void BlockOffsets(const KvSource& kv, std::int64_t seq_stride, std::int64_t page_stride, std::int64_t j,
                             std::int64_t n, std::int64_t* HWY_RESTRICT offset) {
  if (n == 0) return;
  if (kv.page_size == 0) {
    for (std::int64_t c = 0; c < n; ++c) offset[c] = (j + c) * seq_stride;
  } else {
    for (std::int64_t c = 0; c < n; ++c) {
      offset[c] = kv.pages[(j + c) / kv.page_size] * page_stride + ((j + c) % kv.page_size) * seq_stride;
    }
  }
  std::fill(offset + n, offset + kBc, offset[0]);
}

// Requests into L2 the per-token scales of a block's `n` keys, key c's `key_floats` from base + scale_offset[c]
// (its heads' scales), each line once where keys' scales adjoin. Groups of few features carry many scales (groups
// of 8: half the bytes of the int8 rows); left to the hardware, they were read at the pace of demand misses
// (docs/performance.md).
HWY_INLINE void PrefetchKeyScales(const float* base, const std::int64_t* scale_offset, std::int64_t n,
                                  std::int64_t key_floats) {
  const char* last_line = nullptr;
  for (std::int64_t c = 0; c < n; ++c) {
    const auto* begin = reinterpret_cast<const char*>(base + scale_offset[c]);
    const auto* end = reinterpret_cast<const char*>(base + scale_offset[c] + key_floats);
    const char* line = begin - reinterpret_cast<std::uintptr_t>(begin) % 64;
    if (line == last_line) line += 64;
    for (; line < end; line += 64) PrefetchLineToL2(last_line = line);
  }
}

// Lines of the next block's V that the softmax of one row requests (AttendChunk).
inline constexpr std::int64_t kSoftmaxRowRequests = 4;

// Requests the 64-byte lines of up to kMaxRegions contiguous regions into L2, `lines` lines per Next(). Up to
// kMaxParts regions are cut into parts of at least a 4 KiB page, kMaxParts in all at most; more regions are a
// part each. Every part is requested in address order and the calls go to the parts in turn: from main memory,
// requests walking one stream kept fewer lines in flight than requests walking four side by side, and a block
// on 8 or 16 small pages was read faster with a part per page than row by row, one on 32 pages slower
// (docs/performance.md).
class RegionPrefetch {
 public:
  static constexpr std::int64_t kMaxParts = 4;
  static constexpr std::int64_t kMaxRegions = 16;
  static constexpr std::int64_t kMinPartLines = 64;
  // Adds the region of `bytes` at `begin`, one of `regions` (at most kMaxRegions) that share the parts.
  void AddRegion(const void* begin, std::int64_t bytes, std::int64_t regions) {
    const auto address = reinterpret_cast<std::uintptr_t>(begin);
    const std::int64_t lines = (static_cast<std::int64_t>(address % 64) + bytes + 63) / 64;
    const char* first = reinterpret_cast<const char*>(address / 64 * 64);
    const std::int64_t parts =
        std::clamp<std::int64_t>(lines / kMinPartLines, 1, std::max<std::int64_t>(1, kMaxParts / regions));
    const std::int64_t part_lines = (lines + parts - 1) / parts;
    for (std::int64_t k = 0; k < parts; ++k, ++parts_) {
      next_[parts_] = first + 64 * std::min(k * part_lines, lines);
      end_[parts_] = first + 64 * std::min((k + 1) * part_lines, lines);
    }
  }
  void Next(std::int64_t lines) {
    if (parts_ == 0) return;
    const char*& next = next_[part_];
    const std::int64_t requests = std::min(lines, (end_[part_] - next) / 64);
    for (std::int64_t line = 0; line < requests; ++line) PrefetchLineToL2(next + 64 * line);
    next += 64 * requests;
    if (++part_ == parts_) part_ = 0;
  }

 private:
  const char* next_[kMaxRegions];  // parts [0, parts_) only are set and read
  const char* end_[kMaxRegions];
  std::int64_t parts_ = 0, part_ = 0;
};

// For each of `heads` K/V heads: R query rows × keys [j_begin, j_end) → normalized partial O and LSE (the
// ChunkTask of attend.h), in x's working set.
template <typename T>
void AttendChunk(const ChunkTask& t, const AttendScratch& x) {
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(DF()));
  const std::int64_t H = t.heads, R = t.R, d = t.d, d_pad = RoundUp(d, N), dv = t.dv, dv_pad = RoundUp(dv, N);
  std::fill(x.m, x.m + H * R, kNegInf);
  std::fill(x.l, x.l + H * R, 0.0f);
  std::fill(x.O, x.O + H * R * dv_pad, 0.0f);
  // Q_r pre-scaled by s, so that a block no mask or modifier touches needs nothing more than Q K_jᵀ; the
  // other blocks apply the rest of ModifiedScore with scale 1.
  for (std::int64_t row = 0; row < H * R; ++row) {
    WidenScaledRow(t.Q + row * d, d, d_pad, t.scale, x.Q + row * d_pad);
  }
  // With integer scores (an int8 cache only) the rows s·q are quantized per scale group of the cache, and K
  // is read straight from the cache whatever d and the groups are; only V may be widened.
  constexpr bool kInt8 = CacheElementTraits<T>::kIntegerDots;
  const bool integer_scores = kInt8 && t.integer_scores;
  const bool integer_pv = kInt8 && t.integer_pv;  // P̃ V from u8-rounded weights (integer_pv-inl.h)
  QueryInt8 q_int8 = x.q_int8;
  if (integer_scores) {
    q_int8.g = t.scales.group_size;
    QuantizeQueryRows(x.Q, H, R, d_pad, d, q_int8);
  }
  // Element offsets of the block's key rows (K/V head 0) and of the next block's, which are the block's on the
  // next pass
  std::int64_t block_offsets[2][kBc];
  std::int64_t* offset = block_offsets[0];
  std::int64_t* next_offset = block_offsets[1];
  // K and V rows are read straight from the cache when every feature is in a whole vector, even when R rows
  // take several register tiles: the tiles of one key group (ScoreBlock) or of one block (AccumulateBlock)
  // follow each other, so the rows a second tile reads are in L1 (faster than widening them first:
  // docs/performance.md). Otherwise they are widened once per block into zero-padded float32 rows.
  constexpr bool kQuantized = CacheElementTraits<T>::kQuantized;
  const KvScales& scales = t.scales;
  // Scale groups of 2^k features, each a whole number of vectors or half of one, are applied as the tiles load
  // the rows (GroupScales), read straight; other groups, and those of codes that may be inf or NaN (whose V
  // rows may take AccumulateSeenPairs, which reads rows unscaled), are dequantized as the rows are widened.
  const std::int64_t g = scales.group_size;
  const bool group_scales = kQuantized && !CacheElementTraits<T>::kMayHoldNonFinite && g != d &&
                            (g % N == 0 || 2 * g == N) && (g & (g - 1)) == 0;
  const bool widen = d % N != 0 || dv % N != 0 || (kQuantized && g != d && !group_scales);
  // f(the scales the tiles apply to rows read straight): with group scales, K's or V's (`base`, the block's keys
  // at scale_offset), else none
  const auto with_scales = [&](const float* base, const std::int64_t* scale_offset, const auto& f) {
    if constexpr (kQuantized) {
      const int log2_g = std::countr_zero(static_cast<std::uint64_t>(g));
      if (group_scales && g >= N) return f(GroupScales<1>{base, scale_offset, scales.head_stride, 0, log2_g});
      if (group_scales) return f(GroupScales<2>{base, scale_offset, scales.head_stride, 0, log2_g});
    }
    return f(RowScales());
  };
  if (widen) {  // the widened K and V blocks: rows past a short block stay finite
    std::fill(x.K, x.K + kBc * d_pad, 0.0f);
    std::fill(x.V, x.V + kBc * dv_pad, 0.0f);
  }
  std::int64_t block_scale_offsets[2][kBc];  // offsets of the block's key scales (K/V head 0), and the next's
  std::int64_t* scale_offset = block_scale_offsets[0];
  std::int64_t* next_scale_offset = block_scale_offsets[1];
  alignas(64) float k_scale_h[kBc];           // one head's per-key scales, quantized (0 past `cols`)
  alignas(64) float v_scale_h[kBc];
  const T* K[kBc];
  const T* V[kBc];
  const T* V_h[kBc];
  const T* K_next[kBc];
  const float* k_scale[kBc];  // with integer scores, head 0's scales of each key
  const float* K_wide[kBc];
  const float* V_wide[kBc];
  for (std::int64_t c = 0; c < kBc; ++c) K_wide[c] = x.K + c * d_pad, V_wide[c] = x.V + c * dv_pad;
  const KvSource& kv = t.kv;
  const auto* k_base = static_cast<const T*>(kv.k);
  const auto* v_base = static_cast<const T*>(kv.v);

  // Rows whose scores need nothing but the scale (no softcap, no ALiBi) in blocks every row sees in full
  // take a vector path; the others go through ModifiedScore element by element.
  std::int64_t diag_min = std::numeric_limits<std::int64_t>::max();
  std::int64_t diag_max = std::numeric_limits<std::int64_t>::min();
  for (std::int64_t r = 0; r < R; ++r) {
    diag_min = std::min(diag_min, t.diagonal[r]);
    diag_max = std::max(diag_max, t.diagonal[r]);
  }
  bool slopes = false;
  for (std::int64_t r = 0; r < H * R; ++r) slopes = slopes || t.slope[r] != 0.0f;
  const bool plain_mods = R > 0 && t.softcap == 0.0f && !slopes;  // R = 0: no diagonals to test

  // Software prefetch. Read straight from the cache, a block's scores go key group by key group over every head
  // (ScoreBlock); as each line of a K row is read, one line of the next block's K is requested into L2, and as the
  // accumulation reads V rows, lines of the next block's V: demand misses alone leave the core idle while it waits.
  // Each phase requests lines of its own tensor so that requests go out all the time at the pace rows are read
  // (requesting K and V both during the scores and none during the accumulation was slower). When the task's heads
  // fill each key's row of a contiguous cache, a block of keys is one region of memory (of a paged cache, one per run
  // of adjacent pages it reaches), and its lines are requested in address order, in parts side by side (up to four,
  // or one per page: RegionPrefetch), which beat requesting them row by row in the order the tiles read them (head by
  // head, rows 2 KiB apart). The softmax between the two phases then requests kSoftmaxRowRequests lines of the next
  // block's V per row (the accumulation requests the rest), so that requests go out while it runs too. Otherwise (a
  // block across more than 16 pages, or a (head, seq, dim) cache) the next block's rows are requested row by row.
  // The measurements are in docs/performance.md.
  // Widened, a block is done head after head: while one (block, head) unit is computed, the K and V rows of
  // the unit `ahead` units later (2, or the next block when there is one head) are requested.
  const std::int64_t ahead = H >= 2 ? 2 : 1;
  const bool prefetch_widened = H >= 2 || kv.page_size != 0 || kv.seq_stride != d;
  const std::int64_t row_bytes = d * static_cast<std::int64_t>(sizeof(T));
  const bool rows_fill_heads = kv.seq_stride == H * t.head_stride;  // the task's heads fill each key's row

  const std::int64_t first_cols = std::clamp<std::int64_t>(t.j_end - t.j_begin, 0, kBc);
  BlockOffsets(kv, kv.seq_stride, kv.page_stride, t.j_begin, first_cols, offset);
  if constexpr (kQuantized) {
    BlockOffsets(kv, scales.seq_stride, scales.page_stride, t.j_begin, first_cols, scale_offset);
  }
  for (std::int64_t j0 = t.j_begin; j0 < t.j_end; j0 += kBc) {
    const std::int64_t cols = std::min(kBc, t.j_end - j0);
    const std::int64_t next_cols = std::clamp<std::int64_t>(t.j_end - j0 - kBc, 0, kBc);
    BlockOffsets(kv, kv.seq_stride, kv.page_stride, j0 + kBc, next_cols, next_offset);
    // The next block's scale offsets, and its per-token group scales requested into L2 (one scale per row, a
    // few bytes a key, read no faster with requests)
    if constexpr (kQuantized) {
      BlockOffsets(kv, scales.seq_stride, scales.page_stride, j0 + kBc, next_cols, next_scale_offset);
      if (scales.seq_stride != 0 && g != d) {
        const std::int64_t key_floats = (H - 1) * scales.head_stride + d / g;
        PrefetchKeyScales(scales.k, next_scale_offset, next_cols, key_floats);
        PrefetchKeyScales(scales.v, next_scale_offset, next_cols, key_floats);
      }
    }
    // Whether every row sees every key of the block (the window covers [j0, j0 + cols)), and so whether
    // the block's scores need nothing but Q K_jᵀ.
    const bool block_seen_whole =
        R > 0 && t.band.Sees(diag_max, j0) && t.band.Sees(diag_min, j0 + cols - 1);
    const bool full_block = plain_mods && block_seen_whole;
    // The next block's keys in runs of adjacent rows (a contiguous cache is one run, a paged cache one per page
    // the block reaches at most), and whether they are few enough to be requested as regions
    std::int64_t run_start[kBc + 1], runs = 0;
    for (std::int64_t c = 0; c < next_cols; ++c) {
      if (c == 0 || next_offset[c] != next_offset[c - 1] + kv.seq_stride) run_start[runs++] = c;
    }
    run_start[runs] = next_cols;
    const bool next_in_regions = rows_fill_heads && runs <= RegionPrefetch::kMaxRegions;
    RegionPrefetch next_k, next_v;  // the next block, when it is in regions
    if (next_in_regions) {
      const std::int64_t key_bytes = kv.seq_stride * static_cast<std::int64_t>(sizeof(T));
      for (std::int64_t i = 0; i < runs; ++i) {
        const std::int64_t c = run_start[i], bytes = (run_start[i + 1] - c) * key_bytes;
        next_k.AddRegion(k_base + next_offset[c], bytes, runs);
        next_v.AddRegion(v_base + next_offset[c], bytes, runs);
      }
    }
    if (!widen || integer_scores) {  // K/V head 0's rows; keys past `cols` repeat a real row (past the last
                                     // block, K_next = K)
      for (std::int64_t c = 0; c < kBc; ++c) {
        K[c] = k_base + offset[c];
        V[c] = v_base + offset[c];
      }
      if (!next_in_regions) {
        for (std::int64_t c = 0; c < kBc; ++c) K_next[c] = next_cols > 0 ? k_base + next_offset[c] : K[c];
      }
      // As line `byte` of the K rows of keys [c0, c0 + keys) and head `head` is read: as many lines of the
      // next block's K, or the same lines of keys c0 + kBc …
      const auto prefetch_lines = [&](std::int64_t c0, std::int64_t keys, std::int64_t head, std::int64_t byte) {
        if (next_in_regions) return next_k.Next(keys);
        for (std::int64_t c = c0; c < c0 + keys; ++c) {
          PrefetchLineToL2(reinterpret_cast<const char*>(K_next[c] + head) + byte);
        }
      };
      if constexpr (kInt8) {
        if (integer_scores) {
          for (std::int64_t c = 0; c < kBc; ++c) k_scale[c] = scales.k + scale_offset[c];
          IntegerScoreBlock(q_int8, H, R, K, t.head_stride, k_scale, scales.head_stride, d, cols, x.S,
                            prefetch_lines);
        }
      }
      if (!integer_scores) {
        with_scales(scales.k, scale_offset, [&](const auto& k_scales) {
          ScoreBlock(x.Q, H, R, d_pad, K, t.head_stride, d, cols, x.S, k_scales, prefetch_lines);
        });
      }
    }
    for (std::int64_t hk = 0; hk < H; ++hk) {
      float* S_h = x.S + hk * R * kBc;
      float* O_h = x.O + hk * R * dv_pad;
      float* m_h = x.m + hk * R;
      float* l_h = x.l + hk * R;
      if (widen) {  // K_j, V_j widened once into the float32 blocks
        // The unit to prefetch: head hk + ahead, maybe of the next block. Its rows are requested as this
        // unit's rows are widened, so that requests keep pace with the loads instead of filling every miss
        // buffer at once.
        const bool same_block = hk + ahead < H;
        const std::int64_t pf_head = same_block ? hk + ahead : hk + ahead - H;
        const std::int64_t pf_cols = !prefetch_widened ? 0 : same_block ? cols : next_cols;
        const std::int64_t* pf_offset = same_block ? offset : next_offset;
        const T* pf_k = k_base + pf_head * t.head_stride;
        const T* pf_v = v_base + pf_head * t.head_stride;
        for (std::int64_t c = 0; c < std::max(cols, pf_cols); ++c) {
          if (c < pf_cols) PrefetchKey(pf_k + pf_offset[c], pf_v + pf_offset[c], row_bytes);
          if (c >= cols) continue;
          const T* k_row = k_base + hk * t.head_stride + offset[c];
          const T* v_row = v_base + hk * t.head_stride + offset[c];
          if constexpr (kQuantized) {
            const std::int64_t at = scale_offset[c] + hk * scales.head_stride;
            if (!integer_scores) DequantizeRow(k_row, d, d_pad, scales.k + at, scales.group_size, x.K + c * d_pad);
            if (!integer_pv) DequantizeRow(v_row, dv, dv_pad, scales.v + at, scales.group_size, x.V + c * dv_pad);
            else if (!kIntegerPvReadsRawRows) WidenRow(v_row, dv, dv_pad, x.V + c * dv_pad);  // unscaled
          } else {
            WidenRow(k_row, d, d_pad, x.K + c * d_pad);
            WidenRow(v_row, dv, dv_pad, x.V + c * dv_pad);
          }
        }
        if (!integer_scores) {
          ScoreBlock(x.Q + hk * R * d_pad, 1, R, d_pad, K_wide, 0, d_pad, cols, S_h, RowScales(), kNoLineRequests);
        }
      }
      // Read straight, a quantized cache's scores are scaled by their keys' scales: S_j = scale_k[j]·(q·k_j)
      // (integer scores and group scales have them already); P̃ is scaled by V's below, widened or not with
      // integer P̃ V (group scales scale V's vectors instead).
      const bool scale_probs = kQuantized && !group_scales && (!widen || integer_pv);
      if constexpr (kQuantized) {
        // head hk's scale of each key of the block, 0 past `cols`
        const auto gather_scales = [&](const float* head0_scales, float* scale_h) {
          for (std::int64_t c = 0; c < cols; ++c) {
            scale_h[c] = head0_scales[scale_offset[c] + hk * scales.head_stride] * kWideningFactor<T>;
          }
          std::fill(scale_h + cols, scale_h + kBc, 0.0f);
        };
        if (scale_probs) gather_scales(scales.v, v_scale_h);
        if (!widen && !integer_scores && !group_scales) {  // read straight, float scores
          gather_scales(scales.k, k_scale_h);
          ScaleScores(S_h, R, nullptr, k_scale_h);
        }
      }
      // The modifiers the block needs, then the online softmax (the fused kernel's row step; keys past `cols`
      // take no part)
      for (std::int64_t r = 0; r < R; ++r) {
        float* S_r = S_h + r * kBc;
        if (!full_block) {
          const float slope = t.slope[hk * R + r];
          for (std::int64_t c = 0; c < cols; ++c) {
            const std::int64_t diagonal = t.diagonal[r], j = j0 + c;
            S_r[c] = t.band.Sees(diagonal, j)
                         ? ModifiedScore(S_r[c], 1.0f, t.softcap, slope, std::llabs(diagonal - j))
                         : kNegInf;
          }
        }
        std::fill(S_r + cols, S_r + kBc, kNegInf);
        if (next_in_regions && !widen) next_v.Next(kSoftmaxRowRequests);
        x.alpha[r] = OnlineSoftmaxRow<SumUpdate::kFusedMultiplyAdd>(S_r, kBc, m_h[r], l_h[r]);
      }
      // P̃_j·scale_v[j], after l took the unscaled P̃_j (integer P̃ V scales them as it rounds them)
      if (scale_probs && !integer_pv) ScaleScores(S_h, R, nullptr, v_scale_h);
      // Õ += P̃ V_j over rows of `width` features scaled as `v_scales` says, leaving out the keys a row does not
      // see when V_j is not all finite (HasNonFiniteRow: rows whose element type may hold inf or NaN)
      const auto accumulate = [&](const auto* const* V_rows, std::int64_t width, const auto& prefetch_pass,
                                  const auto& v_scales) {
        if (!block_seen_whole && HasNonFiniteRow(V_rows, cols, width)) {
          const auto V_at = [&](std::int64_t c, std::int64_t e) { return V_rows[c] + e; };
          const auto seen = [&](std::int64_t r, std::int64_t c) { return t.band.Sees(t.diagonal[r], j0 + c); };
          AccumulateSeenPairs<ALayout::kRowMajor>(S_h, kBc, R, cols, V_at, width, O_h, dv_pad, x.alpha, seen);
        } else {
          AccumulateBlock(S_h, x.alpha, V_rows, R, cols, width, O_h, dv_pad, v_scales, prefetch_pass);
        }
      };
      // Read straight, as many lines of the next block's V as the keys [c0, c0 + keys) take, or the V rows of
      // the same keys and head one block later
      const auto prefetch_next_v = [&](std::int64_t c0, std::int64_t keys) {
        if (next_in_regions) return next_v.Next(((c0 + keys) * row_bytes + 63) / 64 - (c0 * row_bytes + 63) / 64);
        for (std::int64_t c = c0; c < std::min(c0 + keys, next_cols); ++c) {
          PrefetchRowToL2(v_base + next_offset[c] + hk * t.head_stride, row_bytes);
        }
      };
      if constexpr (kInt8) {
        if (integer_pv) {
          for (std::int64_t c = 0; c < kBc; ++c) V_h[c] = v_base + offset[c] + hk * t.head_stride;
          if (widen) {
            IntegerAccumulateBlock(S_h, v_scale_h, x.alpha, V_h, kIntegerPvReadsRawRows ? nullptr : V_wide, R, cols,
                                   dv, dv_pad, O_h, x.pv, kNoPassRequests);
          } else {
            IntegerAccumulateBlock(S_h, v_scale_h, x.alpha, V_h, nullptr, R, cols, dv, dv_pad, O_h, x.pv,
                                   prefetch_next_v);
          }
          continue;
        }
      }
      if (widen) {
        accumulate(V_wide, dv_pad, kNoPassRequests, RowScales());
      } else {
        for (std::int64_t c = 0; c < kBc; ++c) V_h[c] = V[c] + hk * t.head_stride;
        with_scales(scales.v, scale_offset, [&](const auto& v_scales) {
          accumulate(V_h, dv, prefetch_next_v, v_scales.ForHead(hk));  // pass by pass
        });
      }
    }
    std::swap(offset, next_offset);
    std::swap(scale_offset, next_scale_offset);
  }
  for (std::int64_t row = 0; row < H * R; ++row) {
    float* O_row = x.O + row * dv_pad;
    t.lse[row] = NormalizeAndLse(O_row, dv_pad, x.m[row], x.l[row]);
    std::copy(O_row, O_row + dv, t.O + row * dv);
  }
}


}  // namespace flashattn::HWY_NAMESPACE::decode_kernel
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_DECODE_ATTEND_INL_H_
