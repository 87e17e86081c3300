// The matrix products of the backward pass's tiles, register-blocked (per Highway target; include after
// hwy/highway.h). All operands are float32 in fast memory:
//   ProductABt:  C = A Bᵀ       S = Q_i K_jᵀ and dP = dO_i V_jᵀ, with B packed into panels of NR = 2 vectors
//   AccumulateAB: C += A B      dV_j += P̂ᵀ dO_i,  dK_j += dSᵀ Q_i,  dQ_i += dS K_j, B row-major
// Each micro-tile keeps kMR rows × 2 vectors in 12 accumulators (of 16 AVX2 registers): per step two
// vector loads and one broadcast per row feed 12 FMAs.
#if defined(FLASHATTN_BACKWARD_BACKWARD_TILES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_BACKWARD_BACKWARD_TILES_INL_H_
#undef FLASHATTN_BACKWARD_BACKWARD_TILES_INL_H_
#else
#define FLASHATTN_BACKWARD_BACKWARD_TILES_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::backward_kernel::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

inline constexpr std::int64_t kMR = 6;

// Calls fn(std::integral_constant<int, mr>) for 1 ≤ mr ≤ kMR: every row tail has its own unrolled kernel.
template <class Fn>
HWY_INLINE void WithRows(std::int64_t mr, const Fn& fn) {
  switch (mr) {
    case 6:
      return fn(std::integral_constant<int, 6>());
    case 5:
      return fn(std::integral_constant<int, 5>());
    case 4:
      return fn(std::integral_constant<int, 4>());
    case 3:
      return fn(std::integral_constant<int, 3>());
    case 2:
      return fn(std::integral_constant<int, 2>());
    default:
      return fn(std::integral_constant<int, 1>());
  }
}
static_assert(kMR == 6, "WithRows enumerates the row counts up to kMR");

// Rows [0, rows) of B (row stride ldb, `width` features) as panels of NR = 2·Lanes rows:
// panels[p·NR·width + e·NR + n] = B[p·NR + n][e], zero for rows in [rows, rows_pad).
inline void PackPanels(const float* B, std::int64_t ldb, std::int64_t rows, std::int64_t width,
                       std::int64_t rows_pad, float* panels) {
  const std::int64_t NR = 2 * static_cast<std::int64_t>(hn::Lanes(DF()));
  for (std::int64_t p0 = 0; p0 < rows_pad; p0 += NR) {
    float* panel = panels + p0 * width;
    for (std::int64_t n = 0; n < NR; ++n) {
      const std::int64_t row = p0 + n;
      for (std::int64_t e = 0; e < width; ++e) panel[e * NR + n] = row < rows ? B[row * ldb + e] : 0.0f;
    }
  }
}

// C[r][0, NR) = Σ_e A[r][e] · panel[e][0, NR) for kRows rows.
template <int kRows>
HWY_INLINE void PanelTile(const float* HWY_RESTRICT A, std::int64_t lda, const float* HWY_RESTRICT panel,
                          std::int64_t width, float* HWY_RESTRICT C, std::int64_t ldc) {
  const DF df;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(df));
  VF acc0[kRows], acc1[kRows];
  HWY_UNROLL(6) for (int r = 0; r < kRows; ++r) acc0[r] = acc1[r] = hn::Zero(df);
  for (std::int64_t e = 0; e < width; ++e) {
    const VF b0 = hn::LoadU(df, panel + e * 2 * L);
    const VF b1 = hn::LoadU(df, panel + e * 2 * L + L);
    HWY_UNROLL(6) for (int r = 0; r < kRows; ++r) {
      const VF a = hn::Set(df, A[r * lda + e]);
      acc0[r] = hn::MulAdd(a, b0, acc0[r]);
      acc1[r] = hn::MulAdd(a, b1, acc1[r]);
    }
  }
  HWY_UNROLL(6) for (int r = 0; r < kRows; ++r) {
    hn::StoreU(acc0[r], df, C + r * ldc);
    hn::StoreU(acc1[r], df, C + r * ldc + L);
  }
}

// C[r][slice] += Σ_{c < inner} A[r][c] · B[c][slice] for kRows rows and a slice of kVecs vectors.
template <int kRows, int kVecs>
HWY_INLINE void AccumulateTile(const float* HWY_RESTRICT A, std::int64_t lda, const float* HWY_RESTRICT B,
                               std::int64_t ldb, std::int64_t inner, float* HWY_RESTRICT C,
                               std::int64_t ldc) {
  const DF df;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(df));
  VF acc[kRows][kVecs];
  HWY_UNROLL(6) for (int r = 0; r < kRows; ++r) {
    HWY_UNROLL(2) for (int v = 0; v < kVecs; ++v) acc[r][v] = hn::LoadU(df, C + r * ldc + v * L);
  }
  for (std::int64_t c = 0; c < inner; ++c) {
    VF b[kVecs];
    HWY_UNROLL(2) for (int v = 0; v < kVecs; ++v) b[v] = hn::LoadU(df, B + c * ldb + v * L);
    HWY_UNROLL(6) for (int r = 0; r < kRows; ++r) {
      const VF a = hn::Set(df, A[r * lda + c]);
      HWY_UNROLL(2) for (int v = 0; v < kVecs; ++v) acc[r][v] = hn::MulAdd(a, b[v], acc[r][v]);
    }
  }
  HWY_UNROLL(6) for (int r = 0; r < kRows; ++r) {
    HWY_UNROLL(2) for (int v = 0; v < kVecs; ++v) hn::StoreU(acc[r][v], df, C + r * ldc + v * L);
  }
}

// C (rows × cols_pad, ldc) = A (rows × width, lda) · Bᵀ, B packed by PackPanels into cols_pad rows.
inline void ProductABt(const float* A, std::int64_t lda, std::int64_t rows, const float* panels,
                       std::int64_t cols_pad, std::int64_t width, float* C, std::int64_t ldc) {
  const std::int64_t NR = 2 * static_cast<std::int64_t>(hn::Lanes(DF()));
  for (std::int64_t p0 = 0; p0 < cols_pad; p0 += NR) {
    for (std::int64_t r0 = 0; r0 < rows; r0 += kMR) {
      WithRows(std::min(kMR, rows - r0), [&](auto mr) {
        PanelTile<decltype(mr)::value>(A + r0 * lda, lda, panels + p0 * width, width, C + r0 * ldc + p0, ldc);
      });
    }
  }
}

// C (rows × width_pad, ldc) += A (rows × inner, lda) · B (inner × width_pad, ldb), width_pad a multiple of
// Lanes; slices of two vectors of C's columns (B's slice stays in L1 across the row groups), then one.
inline void AccumulateAB(const float* A, std::int64_t lda, std::int64_t rows, std::int64_t inner,
                         const float* B, std::int64_t ldb, std::int64_t width_pad, float* C,
                         std::int64_t ldc) {
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(DF()));
  for (std::int64_t e0 = 0; e0 < width_pad; e0 += 2 * L) {
    const bool two = e0 + 2 * L <= width_pad;
    for (std::int64_t r0 = 0; r0 < rows; r0 += kMR) {
      WithRows(std::min(kMR, rows - r0), [&](auto mr) {
        constexpr int kRows = decltype(mr)::value;
        if (two)
          AccumulateTile<kRows, 2>(A + r0 * lda, lda, B + e0, ldb, inner, C + r0 * ldc + e0, ldc);
        else
          AccumulateTile<kRows, 1>(A + r0 * lda, lda, B + e0, ldb, inner, C + r0 * ldc + e0, ldc);
      });
    }
  }
}

}  // namespace flashattn::backward_kernel::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_BACKWARD_BACKWARD_TILES_INL_H_
