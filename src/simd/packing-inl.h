// The layouts the register tiles read their B operand in, and the packing into them (per Highway target;
// include after hwy/highway.h): panels of NR = 2·Lanes rows for ProductABt (K_j in the forward pass, K_j and
// V_j in the backward pass), column slices for AccumulateAB (V_j forward, K_j for the backward pass's dQ).
#if defined(FLASHATTN_SIMD_PACKING_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_SIMD_PACKING_INL_H_
#undef FLASHATTN_SIMD_PACKING_INL_H_
#else
#define FLASHATTN_SIMD_PACKING_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "flashattn/flashattn.h"
#include "hwy/highway.h"
#include "simd/convert-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Packing copies elements of S into D: the same type, or float16/bfloat16 widened to float32 on the way
// (the forward pass's K and V, widened once per head instead of in every micro-kernel step).
template <typename S, typename D>
inline constexpr bool kPackable = std::is_same_v<S, D> || std::is_same_v<D, float>;

// Rows [0, rows) of B (row stride ldb, `width` ≤ kMaxHeadDim features) as panels of NR = 2·Lanes rows:
// panels[p·NR·width + e·NR + n] = B[p·NR + n][e], zero for rows in [rows, rows_pad). The micro-kernel then
// reads one contiguous NR-wide strip per feature e.
template <typename S, typename D>
void PackPanels(const S* B, std::int64_t ldb, std::int64_t rows, std::int64_t width, std::int64_t rows_pad,
                D* panels) {
  static_assert(kPackable<S, D>);
  const std::int64_t NR = 2 * static_cast<std::int64_t>(hn::Lanes(DF()));
  for (std::int64_t p0 = 0; p0 < rows_pad; p0 += NR) {
    D* panel = panels + p0 * width;
    for (std::int64_t n = 0; n < NR; ++n) {
      const std::int64_t row = p0 + n;
      if (row >= rows) {
        for (std::int64_t e = 0; e < width; ++e) panel[e * NR + n] = D{};
      } else if constexpr (std::is_same_v<S, D>) {
        for (std::int64_t e = 0; e < width; ++e) panel[e * NR + n] = B[row * ldb + e];
      } else {
        float wide[kMaxHeadDim];
        WidenRow(B + row * ldb, width, width, wide);
        for (std::int64_t e = 0; e < width; ++e) panel[e * NR + n] = wide[e];
      }
    }
  }
}


// How AccumulateAB finds B[c][e]: row-major with stride ldb; or in column slices (the forward pass's V_j),
// the columns cut into slices of two vectors (the last one vector wide when width_pad is an odd number of
// vectors), each slice holding all ldb rows contiguously. A slice is what the micro-kernel reads for every
// row group: in slices it is one sequential block of a few KiB, where a slice of a row-major B is 64-byte
// pieces a row apart (at dv = 128: over 16 pages, in 8 of the L1's 64 sets); docs/fused_kernel.md, "V".
enum class BLayout { kRowMajor, kSlices };

// Where B[c][e] is in the slice layout of `height` rows and width_pad columns.
HWY_INLINE std::int64_t SliceOffset(std::int64_t height, std::int64_t width_pad, std::int64_t c, std::int64_t e) {
  const std::int64_t two_vectors = 2 * static_cast<std::int64_t>(hn::Lanes(DF()));
  const std::int64_t e0 = e / two_vectors * two_vectors;
  return e0 * height + c * std::min(two_vectors, width_pad - e0) + (e - e0);
}

// B (rows × width of row-major src, row stride ld; width ≤ kMaxHeadDim) in the slice layout of `rows` rows
// and width_pad columns, zero in the columns [width, width_pad).
template <typename S, typename D>
void PackSlices(const S* src, std::int64_t ld, std::int64_t rows, std::int64_t width, std::int64_t width_pad,
                D* slices) {
  static_assert(kPackable<S, D>);
  const std::int64_t two_vectors = 2 * static_cast<std::int64_t>(hn::Lanes(DF()));
  // Row c's piece of the slice at column e0 from `row` (S or its widened copy): w = the slice's width.
  const auto copy_piece = [&](const auto* row, std::int64_t c, std::int64_t e0) {
    const std::int64_t w = std::min(two_vectors, width_pad - e0);
    const std::int64_t copied = std::clamp<std::int64_t>(width - e0, 0, w);
    D* piece = slices + e0 * rows + c * w;
    std::copy(row + e0, row + e0 + copied, piece);
    std::fill(piece + copied, piece + w, D{});
  };
  if constexpr (std::is_same_v<S, D>) {  // slice by slice: each written in order
    for (std::int64_t e0 = 0; e0 < width_pad; e0 += two_vectors)
      for (std::int64_t c = 0; c < rows; ++c) copy_piece(src + c * ld, c, e0);
  } else {  // row by row, each widened once
    float wide[kMaxHeadDim];
    for (std::int64_t c = 0; c < rows; ++c) {
      WidenRow(src + c * ld, width, width, wide);
      for (std::int64_t e0 = 0; e0 < width_pad; e0 += two_vectors) copy_piece(wide, c, e0);
    }
  }
}


}  // namespace flashattn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_SIMD_PACKING_INL_H_
