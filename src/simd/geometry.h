// The sizes of one blocked call of the forward or backward kernel, shared by all its work items: the
// problem's, the blocks' (Br query rows, Bc keys), and the padded ones that whole vectors of L floats need.
#ifndef FLASHATTN_SIMD_GEOMETRY_H_
#define FLASHATTN_SIMD_GEOMETRY_H_

#include <cstdint>

#include "common/constants.h"
#include "common/score.h"
#include "flashattn/flashattn.h"

namespace flashattn::simd {

struct Geometry {
  std::int64_t Nq, Nk, d, dv, Hq, Hkv, group;
  std::int64_t Br, Bc, Tr, Tc;  // Tr = ⌈Nq / Br⌉ Q blocks, Tc = ⌈Nk / Bc⌉ K/V blocks
  std::int64_t L, NR;           // floats per vector; keys per packed panel, 2·L
  std::int64_t Bc_pad;          // keys per block, a multiple of NR (the panels' width)
  std::int64_t d_pad, dv_pad;   // feature rows padded to a multiple of L
  float scale, softcap;

  Geometry(const AttentionParams& p, std::int64_t block_rows, std::int64_t block_cols, std::int64_t lanes)
      : Nq(p.seqlen_q),
        Nk(p.seqlen_k),
        d(p.head_dim),
        dv(p.value_head_dim()),
        Hq(p.heads_q),
        Hkv(p.heads_kv),
        group(p.heads_q / p.heads_kv),
        Br(block_rows),
        Bc(block_cols),
        Tr((Nq + Br - 1) / Br),
        Tc((Nk + Bc - 1) / Bc),
        L(lanes),
        NR(2 * lanes),
        Bc_pad(RoundUp(Bc, NR)),
        d_pad(RoundUp(d, L)),
        dv_pad(RoundUp(dv, L)),
        scale(SoftmaxScale(p)),
        softcap(p.softcap) {}
};

}  // namespace flashattn::simd

#endif  // FLASHATTN_SIMD_GEOMETRY_H_
