// The register-blocked matrix products of every tile, forward and backward (per Highway target; include
// after hwy/highway.h):
//   ProductABt:   C = A Bᵀ            S_ij = Q_i K_jᵀ, and backward dP = dO_i V_jᵀ; B packed into panels
//   AccumulateAB: C = diag(α) C + A B  Õ_i = diag(α) Õ_i + P̃_ij V_j, and backward dV, dK, dQ (α = 1)
// Each micro-tile holds kMR rows × 2 vectors: on AVX2 12 vector accumulators, and each step loads two vectors
// and broadcasts one value per row, 12 FMAs per 8 loads, within the two FMA and three load ports of one core.
// B may be float16/bfloat16 (the forward pass's K and V); it is widened to float32 as it is loaded. B's
// layouts and the packing into them are in packing-inl.h.
#if defined(FLASHATTN_SIMD_REGISTER_TILES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_SIMD_REGISTER_TILES_INL_H_
#undef FLASHATTN_SIMD_REGISTER_TILES_INL_H_
#else
#define FLASHATTN_SIMD_REGISTER_TILES_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "hwy/highway.h"
#include "simd/convert-inl.h"
#include "simd/packing-inl.h"

// A lambda inlined wherever it is called, as HWY_INLINE is for functions (GCC and Clang): the tiles of each
// row count, which the compiler's own choice may leave out of line, a call per tile.
#ifndef FLASHATTN_INLINE_LAMBDA
#define FLASHATTN_INLINE_LAMBDA __attribute__((always_inline))
#endif

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Rows of the register tile: 6 × 2 vectors = 12 accumulators, leaving 4 of 16 registers for the operands.
// (A 2-row remainder tile has 4 accumulators, too few to hide the FMA latency: block sizes prefer
// multiples of 6.)
inline constexpr std::int64_t kMR = 6;

// Calls fn(std::integral_constant<int, mr>) for a row count 1 ≤ mr ≤ kMR, so every tail has its own
// fully unrolled micro-kernel.
template <class Fn>
HWY_INLINE void WithRows(std::int64_t mr, const Fn& fn) {
  switch (mr) {
    case 6: return fn(std::integral_constant<int, 6>());
    case 5: return fn(std::integral_constant<int, 5>());
    case 4: return fn(std::integral_constant<int, 4>());
    case 3: return fn(std::integral_constant<int, 3>());
    case 2: return fn(std::integral_constant<int, 2>());
    default: return fn(std::integral_constant<int, 1>());
  }
}
static_assert(kMR == 6, "WithRows enumerates the row counts up to kMR");

// The columns [begin, end) of a tile that one row group of kMR rows needs (a causal or window band's
// boundary tile): ProductABt computes only the panels that meet them and AccumulateAB sums only over them;
// the caller masks the rest of the group's strip.
struct ColumnSpan {
  std::int64_t begin, end;
};

// How a micro-kernel finds A[r][e]: row-major with stride lda; in row groups of kMR rows, each group
// feature-major (A[g·kMR·width + e·kMR + r mod kMR]; a partial last group is padded to kMR rows; ProductABt
// only); or transposed, A[e·lda + r] (AccumulateAB only: the backward pass's P̂ᵀ dO and dSᵀ Q read P̂ and dS
// as they were computed). In row groups and transposed, the micro-kernel's kMR broadcasts of one step come
// from 24 contiguous bytes, one sequential stream instead of kMR.
enum class ALayout { kRowMajor, kRowGroups, kTransposed };

// A[r][e] in layout kLayout (for kRowGroups, A points at the row group and r < kMR).
template <ALayout kLayout>
HWY_INLINE float ElementOfA(const float* HWY_RESTRICT A, std::int64_t lda, std::int64_t r, std::int64_t e) {
  if constexpr (kLayout == ALayout::kRowGroups) return A[e * kMR + r];
  else if constexpr (kLayout == ALayout::kTransposed) return A[e * lda + r];
  else return A[r * lda + e];
}

// The register tile every micro-kernel is made of, kRows rows × kVecs vectors of accumulators (kRows ≤ 8,
// kVecs ≤ 2):
//   c[r][v] = start(r, v);   c[r][v] += a(r, k)·b(k, v) for k = begin … end − 1;   finish(r, v, c[r][v])
// Each step loads b(k, ·) once for all rows and broadcasts a(r, k) once per row. The accumulators are named
// variables, not an array (Arm SVE's sizeless vectors cannot form arrays), and every row and vector is
// written out, so the tile is fully unrolled on every target.
template <int kRows, int kVecs, class Start, class AOf, class BOf, class Finish>
HWY_INLINE void RegisterTile(std::int64_t begin, std::int64_t end, const Start& start, const AOf& a_of,
                             const BOf& b_of, const Finish& finish) {
  static_assert(1 <= kRows && kRows <= 8 && 1 <= kVecs && kVecs <= 2, "a tile of up to 8 × 2 vectors");
  const DF df;
  VF c00 = hn::Zero(df), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;
  VF c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00, c70 = c00, c71 = c00;
  // fn(r, c_r0, c_r1) for each row r < kRows
  const auto each_row = [&](const auto& fn) FLASHATTN_INLINE_LAMBDA {
    fn(0, c00, c01);
    if constexpr (kRows > 1) fn(1, c10, c11);
    if constexpr (kRows > 2) fn(2, c20, c21);
    if constexpr (kRows > 3) fn(3, c30, c31);
    if constexpr (kRows > 4) fn(4, c40, c41);
    if constexpr (kRows > 5) fn(5, c50, c51);
    if constexpr (kRows > 6) fn(6, c60, c61);
    if constexpr (kRows > 7) fn(7, c70, c71);
  };
  each_row([&](int r, VF& c0, VF& c1) FLASHATTN_INLINE_LAMBDA {
    c0 = start(r, 0);
    if constexpr (kVecs > 1) c1 = start(r, 1);
  });
  for (std::int64_t k = begin; k < end; ++k) {
    const VF b0 = b_of(k, 0);
    VF b1 = b0;
    if constexpr (kVecs > 1) b1 = b_of(k, 1);
    each_row([&](int r, VF& c0, VF& c1) FLASHATTN_INLINE_LAMBDA {
      const VF a = hn::Set(df, a_of(r, k));
      c0 = hn::MulAdd(a, b0, c0);
      if constexpr (kVecs > 1) c1 = hn::MulAdd(a, b1, c1);
    });
  }
  each_row([&](int r, VF& c0, VF& c1) FLASHATTN_INLINE_LAMBDA {
    finish(r, 0, c0);
    if constexpr (kVecs > 1) finish(r, 1, c1);
  });
}

// C[r][0, NR) = Σ_e A[r][e] · panel[e][0, NR) for kRows rows (A of one row group when kRowGroups).
template <int kRows, typename T, ALayout kLayout = ALayout::kRowMajor>
HWY_INLINE void PanelTile(const float* HWY_RESTRICT A, std::int64_t lda, const T* HWY_RESTRICT panel,
                          std::int64_t width, float* HWY_RESTRICT C, std::int64_t ldc) {
  const DF df;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(df));
  const auto start = [&](int, int) FLASHATTN_INLINE_LAMBDA { return hn::Zero(df); };
  const auto a_of = [&](int r, std::int64_t e) FLASHATTN_INLINE_LAMBDA { return ElementOfA<kLayout>(A, lda, r, e); };
  const auto b_of = [&](std::int64_t e, int v) FLASHATTN_INLINE_LAMBDA {
    return LoadF32(df, panel + e * 2 * L + v * L);
  };
  const auto finish = [&](int r, int v, VF c) FLASHATTN_INLINE_LAMBDA { hn::StoreU(c, df, C + r * ldc + v * L); };
  RegisterTile<kRows, 2>(0, width, start, a_of, b_of, finish);
}

// C[r][slice] = α_r·C[r][slice] + Σ_{begin ≤ c < end} A[r][c] · B[c][slice] for kRows rows and a slice of
// kVecs vectors (1 or 2), A row-major or transposed; α = 1 when `alpha` is null. The rescale is applied as
// the accumulators are loaded, so C is read and written once per call.
template <int kRows, int kVecs, ALayout kLayout, typename T>
HWY_INLINE void AccumulateTile(const float* HWY_RESTRICT A, std::int64_t lda, const float* HWY_RESTRICT alpha,
                               const T* HWY_RESTRICT B, std::int64_t ldb, std::int64_t begin, std::int64_t end,
                               float* HWY_RESTRICT C, std::int64_t ldc) {
  const DF df;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(df));
  const auto start = [&](int r, int v) FLASHATTN_INLINE_LAMBDA {
    const VF c = hn::LoadU(df, C + r * ldc + v * L);
    return alpha == nullptr ? c : hn::Mul(hn::Set(df, alpha[r]), c);
  };
  const auto a_of = [&](int r, std::int64_t c) FLASHATTN_INLINE_LAMBDA { return ElementOfA<kLayout>(A, lda, r, c); };
  const auto b_of = [&](std::int64_t c, int v) FLASHATTN_INLINE_LAMBDA { return LoadF32(df, B + c * ldb + v * L); };
  const auto finish = [&](int r, int v, VF c) FLASHATTN_INLINE_LAMBDA { hn::StoreU(c, df, C + r * ldc + v * L); };
  RegisterTile<kRows, kVecs>(begin, end, start, a_of, b_of, finish);
}

// C (rows × cols_pad, ldc) = A (rows × width) · Bᵀ, B packed by PackPanels into cols_pad rows (a multiple
// of NR), A laid out as kLayout says (lda is its row stride when row-major). Panel by panel, so that one
// panel stays in L1 across the row groups; columns from `first_col` (a multiple of NR) on. With `spans`
// (one per row group), a group's panels outside its span are not computed.
template <ALayout kLayout = ALayout::kRowMajor, typename T>
HWY_NOINLINE void ProductABt(const float* A, std::int64_t lda, std::int64_t rows, const T* panels,
                              std::int64_t cols_pad, std::int64_t width, float* C, std::int64_t ldc,
                              const ColumnSpan* spans = nullptr, std::int64_t first_col = 0) {
  static_assert(kLayout != ALayout::kTransposed, "row groups are located for row-major or grouped A");
  const std::int64_t NR = 2 * static_cast<std::int64_t>(hn::Lanes(DF()));
  for (std::int64_t p0 = first_col; p0 < cols_pad; p0 += NR) {
    for (std::int64_t r0 = 0; r0 < rows; r0 += kMR) {
      if (spans != nullptr && (p0 >= spans[r0 / kMR].end || p0 + NR <= spans[r0 / kMR].begin)) continue;
      // Both layouts start row group r0 / kMR at element r0·width when lda = width.
      const float* A_group = A + r0 * (kLayout == ALayout::kRowGroups ? width : lda);
      WithRows(std::min(kMR, rows - r0), [&](auto mr) FLASHATTN_INLINE_LAMBDA {
        PanelTile<decltype(mr)::value, T, kLayout>(A_group, lda, panels + p0 * width, width, C + r0 * ldc + p0,
                                                   ldc);
      });
    }
  }
}

// C (rows × width_pad, ldc) = diag(α) C + A (rows × inner) · B (inner × width_pad), width_pad a multiple of
// Lanes, α = 1 when `alpha` is null; A row-major (A[r·lda + c]) or, with kTransposed, given as its
// transpose (A[c·lda + r]); B as kBLayout says (ldb: its row stride, or the rows of its slices). In slices
// of two vectors of C's columns (B's slice stays in L1 across the row groups), then one. With `spans` (one
// per row group), a group sums over its span of the inner dimension only (its A is zero elsewhere).
template <ALayout kLayout = ALayout::kRowMajor, BLayout kBLayout = BLayout::kRowMajor, typename T>
HWY_NOINLINE void AccumulateAB(const float* A, std::int64_t lda, std::int64_t rows, std::int64_t inner, const T* B,
                                std::int64_t ldb, std::int64_t width_pad, float* C, std::int64_t ldc,
                                const float* alpha = nullptr, const ColumnSpan* spans = nullptr) {
  static_assert(kLayout != ALayout::kRowGroups, "row groups are located for row-major or transposed A");
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(DF()));
  for (std::int64_t e0 = 0; e0 < width_pad; e0 += 2 * L) {
    const bool two = e0 + 2 * L <= width_pad;
    const T* B_slice = kBLayout == BLayout::kSlices ? B + e0 * ldb : B + e0;
    const std::int64_t ldb_slice = kBLayout == BLayout::kSlices ? (two ? 2 * L : L) : ldb;
    for (std::int64_t r0 = 0; r0 < rows; r0 += kMR) {
      WithRows(std::min(kMR, rows - r0), [&](auto mr) FLASHATTN_INLINE_LAMBDA {
        constexpr int kRows = decltype(mr)::value;
        const float* alpha_r = alpha == nullptr ? nullptr : alpha + r0;
        const ColumnSpan span = spans == nullptr ? ColumnSpan{0, inner} : spans[r0 / kMR];
        const float* A_group = A + (kLayout == ALayout::kTransposed ? r0 : r0 * lda);
        if (two) {
          AccumulateTile<kRows, 2, kLayout>(A_group, lda, alpha_r, B_slice, ldb_slice, span.begin, span.end,
                                            C + r0 * ldc + e0, ldc);
        } else {
          AccumulateTile<kRows, 1, kLayout>(A_group, lda, alpha_r, B_slice, ldb_slice, span.begin, span.end,
                                            C + r0 * ldc + e0, ldc);
        }
      });
    }
  }
}

}  // namespace flashattn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_SIMD_REGISTER_TILES_INL_H_
