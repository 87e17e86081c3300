// The streaming kernel of decode(): the query rows of one sequence against one chunk of its keys, for every
// K/V head (AttendChunk, attend-inl.h).
//
// Memory traffic: each key and value row of the chunk is read once from main memory (d elements each) and
// used by all R = (Hq/Hkv)·Nq query rows that share the K/V head while it is in L1; Q (Hkv·R×d floats), the
// running (m, l) and Õ (Hkv·R×d floats) stay in L1/L2. Per chunk the only writes are the partial O and
// LSEs, merged afterwards. With R rows, a key costs 2·R·d FMAs against 2·d·sizeof(T) bytes read, so for
// R ≲ 8 the kernel is bound by main-memory bandwidth (on AVX2 at d = 128, to keep up with 20 GB/s of
// float16, R = 4 needs 39% of the FMA peak, R = 8 needs 78%). Within a block of Bc keys the scores take the
// keys in groups, each group for every head, so a (seq, head, dim) cache is read in address order, one
// stream (the prefetchers' best case) instead of Hkv strided ones; the next block's K is requested into L2
// as K rows are read, its V as V rows are (AttendChunk).
#ifndef FLASHATTN_DECODE_ATTEND_H_
#define FLASHATTN_DECODE_ATTEND_H_

#include <cstdint>

#include "common/score.h"
#include "flashattn/flashattn.h"

namespace flashattn::decode_kernel {

// Where key position j of one (sequence, K/V head) lives. Contiguous: k + j·seq_stride. Paged: page
// pages[j / page_size], slot j % page_size: k + page·page_stride + slot·seq_stride (likewise v).
struct KvSource {
  const void* k = nullptr;  // already offset to the K/V head (and to the sequence when contiguous)
  const void* v = nullptr;
  std::int64_t seq_stride = 0;
  std::int64_t page_stride = 0;
  std::int64_t page_size = 0;             // 0 = contiguous
  const std::int32_t* pages = nullptr;   // the sequence's block-table row when paged
};

// The scales of a quantized cache, found like its rows (KvSource) with strides of their own: key j's
// scales for K/V head hk start at k + (j's page or sequence offset) + hk·head_stride, one per group of
// group_size features. A fixed scale has stride 0 along what shares it.
struct KvScales {
  const float* k = nullptr;  // already offset to the sequence when contiguous
  const float* v = nullptr;
  std::int64_t seq_stride = 0, page_stride = 0, head_stride = 0;
  std::int64_t group_size = 0;  // features per scale, dividing d
};

// For each of `heads` K/V heads hk: R = G·Nq query rows × keys [j_begin, j_end) → normalized partial O and
// LSE: one Flash-Decoding chunk. Row r = g·Nq + i of head hk is query i of query head hk·G + g, whose scores
// mods[hk·G + g] describes (the shared ScoreModifiers: scale, band, softcap, ALiBi); its Q row is
// Q[(hk·R + r)·d ...] (float32, already rotated), and it writes O[(hk·R + r)·dv ...] and lse[hk·R + r]. A row
// that sees no key of the chunk gets O = 0, LSE = −∞. K/V head hk's rows are at kv.k + hk·head_stride (d
// features) and kv.v + hk·head_stride (dv features; kv.v = kv.k when V is inside the K rows); a quantized
// cache's values are scaled by `scales`.
struct ChunkTask {
  const float* Q = nullptr;
  std::int64_t heads = 1, head_stride = 0;
  std::int64_t G = 1, Nq = 0, R = 0, d = 0, dv = 0;
  const ScoreModifiers* mods = nullptr;  // heads·G, one per query head
  KvSource kv;
  KvScales scales;
  std::int64_t j_begin = 0, j_end = 0;
  // Selected keys: key c of [j_begin, j_end) is at position positions[c] (one K/V head, heads = 1, and the rows'
  // own keys: no band to apply). Null: key c is at position c.
  const std::int32_t* positions = nullptr;
  // Selected keys with ALiBi: each query head's slope (heads·G; mods then hold none), the distances those of the
  // positions, |diagonal − positions[c]|. Null: no ALiBi, or mods apply it to consecutive keys.
  const float* alibi = nullptr;
  bool integer_scores = false;  // int8 cache: scores from int8 queries (DecodeParams::quantize_query_int8)
  bool integer_pv = false;      // int8 cache: P̃V from u8-rounded weights (DecodeParams::quantize_probs_u8)
  float* O = nullptr;
  float* lse = nullptr;
};

// Keys per block of the kernel: a 32-key block of K and V rows widened to float32 at d = 128 is 32 KiB.
inline constexpr std::int64_t kDecodeBc = 32;

}  // namespace flashattn::decode_kernel

#endif  // FLASHATTN_DECODE_ATTEND_H_
