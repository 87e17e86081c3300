// The IO model (docs/io.md) as closed forms: elements and bytes each algorithm moves between main memory
// ("HBM"; DRAM on a CPU) and fast memory (the per-core cache), its FLOPs and its arithmetic intensity,
// for a whole call (every batch and query head). The forms are read off the loops of src/reference/, of the
// fused kernel (src/forward/) and of decode() (src/decode/), and must equal the counts of RunCounted and
// RunCountedDecode exactly; docs/io.md derives them.
//
// Byte sizes: Q, K, V, O, the S, P matrices of standard and the fused kernel's packed K and V move in the
// element type; l, m, LSE, and decode's gathered Q tile and partial results in float32.
#ifndef FLASHATTN_TOOLS_IO_MODEL_IO_MODEL_H_
#define FLASHATTN_TOOLS_IO_MODEL_IO_MODEL_H_

#include <cstdint>
#include <string>

#include "flashattn/flashattn.h"

namespace flashattn::io_model {

// Elements and bytes read from and written to main memory, for a whole call: the closed forms, and the
// counted runs (the reference layer's own counts, src/reference/io_count.h, summed over every head).
struct IoCount {
  std::int64_t read = 0, written = 0;
  std::int64_t read_bytes = 0, written_bytes = 0;
  IoCount& operator+=(const IoCount& other) {
    read += other.read, written += other.written;
    read_bytes += other.read_bytes, written_bytes += other.written_bytes;
    return *this;
  }
  bool operator==(const IoCount&) const = default;
};

// One algorithm's cost for one call.
struct Cost {
  IoCount io;
  std::int64_t Br = 0, Bc = 0;  // block sizes (0 for standard)
  double flops = 0.0;           // the two matrix products, 2·Nq·Nk·(d + dv) per head over the visited tiles
  double Bytes() const { return static_cast<double>(io.read_bytes + io.written_bytes); }
  double Intensity() const { return Bytes() > 0 ? flops / Bytes() : 0.0; }  // FLOPs per byte
};

// standard: Q, K read once; S written, read; P written, read; V read once; O (and LSE) written.
// Per head with Nq = Nk = N, d = dv and no LSE this is 4Nd + 4N² elements (docs/algorithms.md).
Cost Standard(const AttentionParams& params);

// flash1 with the block sizes of reference::ChooseBlockSizes: K, V read once; Q, O, l, m read and O, l, m
// written once per K/V block; O, l, m initialized; l, m read again for LSE. Every tile is visited, masked
// or not (the reference does not skip tiles).
Cost Flash1(const AttentionParams& params);

// flash2 with the same block sizes: Q read and O (and LSE) written once, K and V read once per Q block.
// Every tile is visited.
Cost Flash2(const AttentionParams& params);

// The flash2 loop that skips tiles lying wholly outside the causal / sliding-window band, with block sizes
// (Br, Bc): Q read and O (and LSE) written once, K_j and V_j read for each visited tile.
Cost Flash2SkippingMaskedTiles(const AttentionParams& params, std::int64_t Br, std::int64_t Bc);

// How the fused kernel (src/forward/forward-inl.h, ForwardT) lays out one call; its traffic
// depends on all of it.
struct FusedGeometry {
  std::int64_t Br = 0, Bc = 0;  // forward_kernel::ChooseFusedTiling clamped to [1, max(1, Nq)] and [1, max(1, Nk)]
  std::int64_t Tr = 0, Tc = 0;  // Q blocks, K/V blocks
  std::int64_t L = 0, NR = 0;   // float32 lanes of the dispatched SIMD target; panel width NR = 2·L
  std::int64_t Bc_pad = 0;      // keys per packed K block: Bc rounded up to NR (the padding is zeros)
  std::int64_t dv_pad = 0;      // elements per packed V row: dv rounded up to L
  bool packs_v = false;         // V is packed next to K: both fit the kernel's 16 MiB packing budget
  // Bytes per packed K and V element: float16/bfloat16 are packed as float32 when Br > 6 (PacksKvWide), else
  // packed in their own type.
  std::int64_t packed_element_bytes = 0;
};
FusedGeometry FusedGeometryOf(const AttentionParams& params);
// Float32 lanes per vector on the target the next fused-kernel call dispatches to, and that target's name
// (e.g. "AVX3").
std::int64_t FusedFloatLanes();
std::string FusedTargetName();

// The fused kernel (src/forward/) with the block sizes it really uses (FusedGeometryOf: from the
// detected L2, not from params.tiling.fast_memory_bytes; block_rows/block_cols override). Its loops, for a
// call with at least one query row (a call without any returns at once and moves nothing):
//   per (batch, K/V head): K read once and written as packed panels, Bc_pad keys per block; if packs_v,
//     V read once and written as rows of dv_pad elements (packed elements of packed_element_bytes);
//   per (query head, Q block): Q_i read; for each K/V block the band of the Q block reaches (blocks wholly
//     outside the causal/window band are skipped) the packed K_j read, padded to whole panels, and V_j
//     read, packed (dv_pad per row) or from the caller's V (dv per row); O (and LSE) written once.
// Not counted, by any model here: reads of a mask tensor and of ALiBi slopes.
Cost Fused(const AttentionParams& params);

// Flash-Decoding as decode() runs it (src/decode/decode.cc), for a call with no new keys, every sequence
// Nk keys long and d = dv (decode's K and V share head_dim). Per sequence: Q (Hq·Nq rows) is read once and
// written as a float32 tile of gathered rows; the keys some row may see, [j_begin, j_end), are cut into
// `splits` chunks of ⌈(j_end − j_begin)/splits⌉ keys (the last ones may be short or empty). A chunk with
// keys reads the float32 Q tile and each of its K and V rows once, for every K/V head; every chunk, empty
// or not, writes a float32 partial (O_k, LSE_k) for all Hq·Nq rows. The merge reads each row's `splits`
// LSEs and the O_k of the partials whose LSE is finite (the row saw a key of that chunk), and writes O (and
// LSE). Bc of the result is the chunk length. Fails for d ≠ dv, mask tensors and dropout, which decode lacks.
Cost Decode(const AttentionParams& params, std::int64_t splits);
// The split count decode() chooses for this shape: choose_num_splits(batch, Nk, params.num_threads).
std::int64_t DecodeSplits(const AttentionParams& params);

// Runs an algorithm on `params` — which must own real buffers — with every main-memory access counted, and
// returns the traffic summed over all heads. Validates first. standard, flash1 and flash2 are the reference
// algorithms themselves; fused is a counted FlashAttention-2 loop with the fused kernel's geometry, packing
// and tile skipping (tools/io_model/counted_fused.cc). Each writes O and LSE.
IoCount RunCounted(const AttentionParams& params, Algorithm algorithm);
// decode()'s split-KV loop counted the same way (tools/io_model/counted_decode.cc): gathered Q, chunks,
// partials, merge. Writes O and LSE; fails where Decode does.
IoCount RunCountedDecode(const AttentionParams& params, std::int64_t splits);

// Bytes of fast memory one Br×Bc tile of the tiled loops occupies in float32: Q_i, O_i (Br rows), K_j, V_j
// (Bc rows), S_ij, and l_i, m_i.
std::int64_t TileBytes(std::int64_t Br, std::int64_t Bc, std::int64_t d, std::int64_t dv);

}  // namespace flashattn::io_model

#endif  // FLASHATTN_TOOLS_IO_MODEL_IO_MODEL_H_
