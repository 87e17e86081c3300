// The product of a tile that hides some pairs and holds an inf or a NaN, for every kernel (per Highway target;
// include after hwy/highway.h). A pair that a row does not see (outside the band, dropped by the boolean
// mask, or a row that saw no key) has weight 0 in the fast products, and 0·inf or 0·NaN would carry the
// non-finite value into a row that never saw it; here such a pair is left out instead of multiplied by 0.
// The pairs a row sees are summed in AccumulateAB's order with its MulAdd, so an element that no inf or NaN
// reaches gets the fast path's value. The kernels send a tile here only when it both hides a pair and
// holds a non-finite operand (HasNonFinite), which finite inputs never do.
#if defined(FLASHATTN_SIMD_SEEN_PAIRS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_SIMD_SEEN_PAIRS_INL_H_
#undef FLASHATTN_SIMD_SEEN_PAIRS_INL_H_
#else
#define FLASHATTN_SIMD_SEEN_PAIRS_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"
#include "simd/convert-inl.h"
#include "simd/register_tiles-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// C[r] = α_r·C[r] + Σ_{k < inner, seen(r, k)} A[r][k]·B[k] for r < rows, over the width_pad columns of C
// (a multiple of Lanes; rows ldc apart); α = 1 when `alpha` is null. A is row-major or transposed as in
// AccumulateAB; B_at(k, e) points at B[k][e, e + Lanes) (float32, or float16/bfloat16 widened as loaded).
template <ALayout kLayout, class BAt, class Seen>
void AccumulateSeenPairs(const float* A, std::int64_t lda, std::int64_t rows, std::int64_t inner, const BAt& B_at,
                         std::int64_t width_pad, float* C, std::int64_t ldc, const float* alpha, const Seen& seen) {
  static_assert(kLayout != ALayout::kRowGroups, "row groups are located for row-major or transposed A");
  const DF df;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(df));
  for (std::int64_t r = 0; r < rows; ++r) {
    float* C_r = C + r * ldc;
    if (alpha != nullptr) {
      const VF scale = hn::Set(df, alpha[r]);
      for (std::int64_t e = 0; e < width_pad; e += L) hn::StoreU(hn::Mul(scale, hn::LoadU(df, C_r + e)), df, C_r + e);
    }
    for (std::int64_t k = 0; k < inner; ++k) {
      if (!seen(r, k)) continue;
      const VF a = hn::Set(df, ElementOfA<kLayout>(A, lda, r, k));
      for (std::int64_t e = 0; e < width_pad; e += L) {
        hn::StoreU(hn::MulAdd(a, LoadF32(df, B_at(k, e)), hn::LoadU(df, C_r + e)), df, C_r + e);
      }
    }
  }
}

}  // namespace flashattn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_SIMD_SEEN_PAIRS_INL_H_
