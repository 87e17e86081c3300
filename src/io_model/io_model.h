// The IO model of SPEC §6 as closed forms: elements and bytes each algorithm moves between main memory
// ("HBM"; DRAM on a CPU) and fast memory (the per-core cache), its FLOPs and its arithmetic intensity,
// for a whole call (every batch and query head). The forms are read off the loops of src/reference/ and
// must equal the counts of RunCounted exactly; docs/io.md derives them.
//
// Byte sizes: Q, K, V, O and the S, P matrices of standard move in the element type; l, m, LSE and the
// partial results of decode in float32.
#ifndef FLASHATTN_IO_MODEL_IO_MODEL_H_
#define FLASHATTN_IO_MODEL_IO_MODEL_H_

#include <cstdint>
#include <string>

#include "flashattn/flashattn.h"
#include "reference/io_count.h"

namespace flashattn::io_model {

using reference::IoCount;

// One algorithm's cost for one call.
struct Cost {
  IoCount io;
  std::int64_t Br = 0, Bc = 0;  // block sizes (0 for standard)
  double flops = 0.0;           // the two matrix products, 2·Nq·Nk·(d + dv) per head over the visited tiles
  double Bytes() const { return static_cast<double>(io.read_bytes + io.written_bytes); }
  double Intensity() const { return Bytes() > 0 ? flops / Bytes() : 0.0; }  // FLOPs per byte
};

// standard: Q, K read once; S written, read; P written, read; V read once; O (and LSE) written.
// Per head with Nq = Nk = N, d = dv and no LSE this is the seed's 4Nd + 4N² elements.
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

// The fused kernel (src/kernels/, issue 3) with the block sizes it really uses (ChooseFusedTiling: from the
// detected L2, not from params.tiling.fast_memory_bytes; block_rows/block_cols override). Its loops: per
// (batch, K/V head) K is read once and written once as packed panels; per (query head, Q block) Q_i is read,
// and for each K/V tile the band of the Q block reaches (masked tiles are skipped) the packed K_j and V_j are
// read; O (and LSE) are written once. Not counted: the padding of each packed tile to the 2-vector panel
// width, and the float32 copy of V's last dv mod (vector width) columns — both at most one panel per tile.
Cost Fused(const AttentionParams& params);

// Flash-Decoding (SPEC §4), a model only (there is no decode kernel to count yet): for each (batch, K/V
// head) the G = Hq/Hkv query heads' Nq rows form one problem of G·Nq rows. K/V is split into `splits`
// chunks; each chunk reads its K, V rows once and all G·Nq query rows, and writes a partial (O_k, LSE_k) in
// float32; the merge reads every partial and writes O (and LSE). Meant for small Nq.
Cost Decode(const AttentionParams& params, std::int64_t splits);

// Runs a reference algorithm (standard, flash1 or flash2) on `params` — which must own real buffers — with
// every main-memory access counted, and returns the traffic summed over all heads. Validates first.
IoCount RunCounted(const AttentionParams& params, Algorithm algorithm);

// Bytes of fast memory one Br×Bc tile of the tiled loops occupies in float32: Q_i, O_i (Br rows), K_j, V_j
// (Bc rows), S_ij, and l_i, m_i.
std::int64_t TileBytes(std::int64_t Br, std::int64_t Bc, std::int64_t d, std::int64_t dv);

}  // namespace flashattn::io_model

#endif  // FLASHATTN_IO_MODEL_IO_MODEL_H_
