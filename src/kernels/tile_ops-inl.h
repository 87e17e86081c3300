// The two matrix products of a tile, register-blocked (per Highway target; include after hwy/highway.h):
//   S_ij = Q_i K_jᵀ   ScoreTile:  kRows query rows × 2 vectors of keys, K_j read from packed panels
//   Õ_i += P̃_ij V_j  AccumulatePV: kRows rows × 2 vectors of output features, V_j row-major
// On AVX2 a 6-row tile holds 12 vector accumulators, and each step loads two vectors and broadcasts one
// value per row: 12 FMAs per 8 loads, within the two FMA and three load ports of one core.
// float16/bfloat16 K and V stay in their element type and are widened to float32 as they are loaded.
#if defined(FLASHATTN_KERNELS_TILE_OPS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_KERNELS_TILE_OPS_INL_H_
#undef FLASHATTN_KERNELS_TILE_OPS_INL_H_
#else
#define FLASHATTN_KERNELS_TILE_OPS_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Rows of the register tile: 6 × 2 vectors = 12 accumulators, leaving 4 of 16 registers for the operands.
inline constexpr std::int64_t kMR = 6;

// One vector of float32 from `Lanes(df)` consecutive elements of T.
HWY_INLINE VF LoadF32(DF df, const float* p) { return hn::LoadU(df, p); }
HWY_INLINE VF LoadF32(DF df, const hwy::float16_t* p) {
  return hn::PromoteTo(df, hn::LoadU(hn::Rebind<hwy::float16_t, DF>(), p));
}
HWY_INLINE VF LoadF32(DF df, const hwy::bfloat16_t* p) {
  return hn::PromoteTo(df, hn::LoadU(hn::Rebind<hwy::bfloat16_t, DF>(), p));
}

// Packs keys [0, cols) of a K block (rows k_rows[c·k_row_stride + e]) into panels of NR = 2·Lanes keys:
// panel[p][e][n] = K[p·NR + n][e], zero beyond `cols`. The micro-kernel then reads one contiguous
// NR-wide strip per feature e. Panels take Bc_pad = ⌈Bc / NR⌉·NR keys.
template <typename T>
void PackKBlock(const T* k_rows, std::int64_t k_row_stride, std::int64_t cols, std::int64_t d,
                std::int64_t Bc_pad, T* panels) {
  const std::int64_t NR = 2 * static_cast<std::int64_t>(hn::Lanes(DF()));
  for (std::int64_t p0 = 0; p0 < Bc_pad; p0 += NR) {
    T* panel = panels + p0 * d;
    for (std::int64_t n = 0; n < NR; ++n) {
      const std::int64_t c = p0 + n;
      if (c < cols) {
        const T* k = k_rows + c * k_row_stride;
        for (std::int64_t e = 0; e < d; ++e) panel[e * NR + n] = k[e];
      } else {
        for (std::int64_t e = 0; e < d; ++e) panel[e * NR + n] = T{};
      }
    }
  }
}

// S[r][0, NR) = Σ_e Q[r][e] · panel[e][0, NR) for kRows rows (Q row-major with stride ldq, S with lds).
template <int kRows, typename T>
HWY_INLINE void ScoreTile(const float* HWY_RESTRICT Q, std::int64_t ldq, const T* HWY_RESTRICT panel,
                          std::int64_t d, float* HWY_RESTRICT S, std::int64_t lds) {
  const DF df;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(df));
  VF acc0[kRows], acc1[kRows];
  HWY_UNROLL(6) for (int r = 0; r < kRows; ++r) acc0[r] = acc1[r] = hn::Zero(df);
  for (std::int64_t e = 0; e < d; ++e) {
    const VF k0 = LoadF32(df, panel + e * 2 * L);
    const VF k1 = LoadF32(df, panel + e * 2 * L + L);
    HWY_UNROLL(6) for (int r = 0; r < kRows; ++r) {
      const VF q = hn::Set(df, Q[r * ldq + e]);
      acc0[r] = hn::MulAdd(q, k0, acc0[r]);
      acc1[r] = hn::MulAdd(q, k1, acc1[r]);
    }
  }
  HWY_UNROLL(6) for (int r = 0; r < kRows; ++r) {
    hn::Store(acc0[r], df, S + r * lds);
    hn::Store(acc1[r], df, S + r * lds + L);
  }
}

// Õ[r][slice] = α_r·Õ[r][slice] + Σ_{c<cols} P̃[r][c] · V[c][slice] for kRows rows and a slice of kVecs
// vectors (1 or 2) starting at V's column 0: the rescale by α = e^{m_old − m_new} is applied as the
// accumulators are loaded, so Õ is read and written once per tile.
template <int kRows, int kVecs, typename T>
HWY_INLINE void AccumulatePV(const float* HWY_RESTRICT P, std::int64_t ldp, const float* HWY_RESTRICT alpha,
                             const T* HWY_RESTRICT V, std::int64_t ldv, std::int64_t cols,
                             float* HWY_RESTRICT O, std::int64_t ldo) {
  const DF df;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(df));
  VF acc[kRows][kVecs];
  HWY_UNROLL(6) for (int r = 0; r < kRows; ++r) {
    const VF a = hn::Set(df, alpha[r]);
    HWY_UNROLL(2) for (int v = 0; v < kVecs; ++v) acc[r][v] = hn::Mul(a, hn::Load(df, O + r * ldo + v * L));
  }
  for (std::int64_t c = 0; c < cols; ++c) {
    VF v_c[kVecs];
    HWY_UNROLL(2) for (int v = 0; v < kVecs; ++v) v_c[v] = LoadF32(df, V + c * ldv + v * L);
    HWY_UNROLL(6) for (int r = 0; r < kRows; ++r) {
      const VF p = hn::Set(df, P[r * ldp + c]);
      HWY_UNROLL(2) for (int v = 0; v < kVecs; ++v) acc[r][v] = hn::MulAdd(p, v_c[v], acc[r][v]);
    }
  }
  HWY_UNROLL(6) for (int r = 0; r < kRows; ++r) {
    HWY_UNROLL(2) for (int v = 0; v < kVecs; ++v) hn::Store(acc[r][v], df, O + r * ldo + v * L);
  }
}

}  // namespace flashattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_KERNELS_TILE_OPS_INL_H_
