// The masks and score modifiers of common/score.h on a strip of scores (per Highway target), for the forward
// and backward kernels. The kernels classify each tile first (ScoreModifiers::TileNeedsModifiers): tiles
// outside the causal/window band are never computed, tiles inside it without softcap, ALiBi or mask tensor
// skip this file entirely; only the others come here.
//
// The order is ScoreModifiers::Score's: S = s·q·k (s is folded into Q), then softcap S ← c·tanh(S/c), ALiBi
// S −= slope·|i + Nk − Nq − j|, the additive mask, and finally −∞ for keys outside the band, in another
// document or dropped by the boolean mask. Under a block mask these predicates (the additive mask with them)
// apply on partial blocks only; absent blocks are −∞ and full blocks keep their scores.
#if defined(FLASHATTN_SIMD_SCORE_MODIFIERS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_SIMD_SCORE_MODIFIERS_INL_H_
#undef FLASHATTN_SIMD_SCORE_MODIFIERS_INL_H_
#else
#define FLASHATTN_SIMD_SCORE_MODIFIERS_INL_H_
#endif

#include <algorithm>
#include <cstdint>

#include "common/constants.h"
#include "common/score.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "simd/convert-inl.h"  // DF, and the namespace alias hn

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE {

// tanh for the softcap, here and in the backward kernel. Highway 1.0.3's emulated targets convert NaN to
// int with a C++ cast inside Tanh (undefined, UBSan): there a NaN lane goes in as 0 and comes out as the NaN
// it was. Hardware targets call Highway's Tanh directly.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V SoftcapTanh(D d, V x) {
#if HWY_TARGET == HWY_EMU128 || HWY_TARGET == HWY_SCALAR
  const auto is_nan = hn::IsNaN(x);
  return hn::IfThenElse(is_nan, x, hn::Tanh(d, hn::IfThenZeroElse(is_nan, x)));
#else
  return hn::Tanh(d, x);
#endif
}

// −∞ on the keys [begin, end) whose document (ids[c]) is not the row's, a vector of keys at a time.
HWY_INLINE void ApplyDocument(std::int32_t document, const std::int32_t* HWY_RESTRICT ids, std::int64_t begin,
                              std::int64_t end, float* HWY_RESTRICT S_r) {
  const DF df;
  const hn::RebindToSigned<DF> di;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(df));
  const auto row_document = hn::Set(di, document);
  const auto neg_inf = hn::Set(df, kNegInf);
  std::int64_t c = begin;
  for (; c + L <= end; c += L) {
    const auto other = hn::RebindMask(df, hn::Ne(hn::LoadU(di, ids + c), row_document));
    hn::StoreU(hn::IfThenElse(other, neg_inf, hn::LoadU(df, S_r + c)), df, S_r + c);
  }
  for (; c < end; ++c)
    if (ids[c] != document) S_r[c] = kNegInf;
}

// The element predicates on keys [j0 + begin, j0 + end) of row i (S_r: the row's scores from key j0): the
// additive mask's term, then −∞ outside the band, in another document or dropped by the boolean mask.
HWY_INLINE void ApplyPredicates(const ScoreModifiers& mods, std::int64_t i, std::int64_t j0, std::int64_t begin,
                                std::int64_t end, float* HWY_RESTRICT S_r) {
  if (mods.mask_kind == MaskKind::kAdditive) {
    const float* bias = static_cast<const float*>(mods.mask) + i * mods.mask_stride_row;
    for (std::int64_t c = begin; c < end; ++c) S_r[c] += bias[(j0 + c) * mods.mask_stride_col];
  }
  const IndexRange keys = mods.KeysOf(i);
  for (std::int64_t c = begin; c < std::min(end, keys.begin - j0); ++c) S_r[c] = kNegInf;
  for (std::int64_t c = std::max(begin, keys.end - j0); c < end; ++c) S_r[c] = kNegInf;
  if (mods.documents != nullptr) {
    ApplyDocument(mods.documents[mods.Diagonal(i)], mods.documents + j0, begin, end, S_r);
  }
  if (mods.mask_kind == MaskKind::kBool) {
    const std::uint8_t* keep = static_cast<const std::uint8_t*>(mods.mask) + i * mods.mask_stride_row;
    for (std::int64_t c = begin; c < end; ++c)
      if (keep[(j0 + c) * mods.mask_stride_col] == 0) S_r[c] = kNegInf;
  }
}

// Row i's keys [j0, j0 + cols) under a block mask, one key block at a time: −∞ on absent blocks, the
// predicates on partial ones, nothing on full ones.
HWY_INLINE void ApplyBlockClasses(const ScoreModifiers& mods, std::int64_t i, std::int64_t j0, std::int64_t cols,
                                  float* HWY_RESTRICT S_r) {
  const std::int64_t Kb = mods.blocks.Kb, r = i / mods.blocks.Qb;
  for (std::int64_t begin = 0; begin < cols;) {
    const std::int64_t c = (j0 + begin) / Kb, end = std::min(cols, (c + 1) * Kb - j0);
    switch (mods.ClassOf(r, c)) {
      case BlockClass::kAbsent: std::fill(S_r + begin, S_r + end, kNegInf); break;
      case BlockClass::kPartial: ApplyPredicates(mods, i, j0, begin, end, S_r); break;
      case BlockClass::kFull: break;
    }
    begin = end;
  }
}

// Applies the modifiers to rows [i0, i0 + rows) × keys [j0, j0 + cols) held in S (row stride lds, rows
// padded to a multiple of Lanes, which the vector passes also touch; the caller resets the padding).
HWY_INLINE void ApplyScoreModifiers(const ScoreModifiers& mods, std::int64_t i0, std::int64_t rows,
                                    std::int64_t j0, std::int64_t cols, float* HWY_RESTRICT S,
                                    std::int64_t lds) {
  const DF df;
  const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(df));
  const std::int64_t cols_L = RoundUp(cols, L);
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t i = i0 + r;
    float* S_r = S + r * lds;
    if (mods.softcap > 0.0f) {  // S ← c·tanh(S / c)
      const auto cap = hn::Set(df, mods.softcap);
      for (std::int64_t c = 0; c < cols_L; c += L) {
        hn::Store(hn::Mul(cap, SoftcapTanh(df, hn::Div(hn::Load(df, S_r + c), cap))), df, S_r + c);
      }
    }
    if (mods.alibi_slope != 0.0f) {  // S −= slope·|diagonal − j|, distances exact in float below 2^24
      const auto slope = hn::Set(df, mods.alibi_slope);
      const auto first = hn::Set(df, static_cast<float>(i + mods.offset - j0));
      for (std::int64_t c = 0; c < cols_L; c += L) {
        const auto distance = hn::Abs(hn::Sub(first, hn::Iota(df, static_cast<float>(c))));
        hn::Store(hn::NegMulAdd(slope, distance, hn::Load(df, S_r + c)), df, S_r + c);
      }
    }
    if (mods.BlockSparse()) {
      ApplyBlockClasses(mods, i, j0, cols, S_r);
    } else {
      ApplyPredicates(mods, i, j0, 0, cols, S_r);
    }
  }
}

}  // namespace flashattn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_SIMD_SCORE_MODIFIERS_INL_H_
