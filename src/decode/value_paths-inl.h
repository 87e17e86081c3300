// The value paths of the decode kernel (AttendBlocks, attend-inl.h), per Highway target: how one K/V head's
// Õ = diag(α) Õ + P̃ V_j is formed for a block of keys, chosen once per call like the key path
// (key_paths-inl.h):
//   StraightValues<T, Scales>  the cache's rows read straight into the register tiles (AccumulateBlock); with a
//                              quantized row's one scale, P̃_j·scale_v[j] first (RowScales; l has summed the
//                              unscaled P̃), or group scales on the vectors as they load (GroupScales)
//   WidenedValues<T>           the rows widened (dequantized) into zero-padded float32 rows first
//   IntegerValues              an int8 cache: P̃ V from u8-rounded weights, exact integer sums (integer_pv-inl.h)
// Where some row does not see some key of the block and V holds an inf or a NaN, the pairs it does not see are
// left out instead of weighted by 0 (AccumulateSeenPairs). Each path requests the next block's V lines at the
// pace it reads this block's (read_plan.h).
#if defined(FLASHATTN_DECODE_VALUE_PATHS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_DECODE_VALUE_PATHS_INL_H_
#undef FLASHATTN_DECODE_VALUE_PATHS_INL_H_
#else
#define FLASHATTN_DECODE_VALUE_PATHS_INL_H_
#endif

#include <algorithm>
#include <cstdint>

#include "common/cache_element_traits.h"
#include "decode/attend.h"
#include "decode/attend_scratch-inl.h"
#include "decode/attend_tiles-inl.h"
#include "decode/integer_pv-inl.h"
#include "decode/key_paths-inl.h"
#include "decode/read_plan.h"
#include "hwy/highway.h"
#include "simd/convert-inl.h"
#include "simd/seen_pairs-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE::decode_kernel {

// The request callback of the accumulation: as keys [c0, c0 + keys) are first read, as many V rows' lines of
// the next block.
struct ValueLineRequests {
  LineRequests* next;
  std::int64_t lines_per_key;
  HWY_INLINE void operator()(std::int64_t, std::int64_t keys) const { next->Issue(keys * lines_per_key); }
};

// Head h's V rows of the block's keys, widened (and dequantized) into x.V, zero-padded to dv_pad; each row's
// lines of the next block requested as it is read.
template <typename T>
HWY_INLINE void WidenValueRows(const ChunkTask& t, const BlockRows& rows, std::int64_t h, std::int64_t dv_pad,
                               LineRequests& next_values, float* V_wide) {
  const auto* base = static_cast<const T*>(t.kv.v);
  for (std::int64_t c = 0; c < rows.cols; ++c) {
    const T* row = base + h * t.head_stride + rows.offset[c];
    if constexpr (CacheElementTraits<T>::kQuantized) {
      const float* scales = t.scales.v + rows.scale_offset[c] + h * t.scales.head_stride;
      DequantizeRow(row, t.dv, dv_pad, scales, t.scales.group_size, V_wide + c * dv_pad);
    } else {
      WidenRow(row, t.dv, dv_pad, V_wide + c * dv_pad);
    }
    next_values.Issue(LinesOf<T>(t.dv));
  }
}

// Whether any of the `cols` rows V[c] (`width` elements each, a multiple of Lanes) holds an inf or a NaN.
template <typename T>
bool HasNonFiniteRow(const T* const* V, std::int64_t cols, std::int64_t width) {
  for (std::int64_t c = 0; c < cols; ++c)
    if (HasNonFinite(V[c], width)) return true;
  return false;
}

// Õ += P̃ V over the pairs the rows see: for blocks that hide some key from some row and hold an inf or a NaN
// in V (float32 rows, `width` features).
HWY_INLINE void AccumulateSeenValues(const ChunkTask& t, const BlockRows& rows, const float* P, const float* alpha,
                                     const float* const* V, std::int64_t width, float* O, std::int64_t ldo) {
  const auto V_at = [&](std::int64_t c, std::int64_t e) { return V[c] + e; };
  const ScoreModifiers& mods = t.mods[0];  // every query head shares the band
  const auto seen = [&](std::int64_t r, std::int64_t c) { return mods.Visible(r % t.Nq, rows.j0 + c); };
  AccumulateSeenPairs<ALayout::kRowMajor>(P, kBc, t.R, rows.cols, V_at, width, O, ldo, alpha, seen);
}

template <typename T, class Scales>
class StraightValues {
 public:
  StraightValues(const ChunkTask& t, const AttendScratch& x)
      : t_(t),
        x_(x),
        dv_pad_(PaddedToLanes(t.dv)),
        pass_keys_(AccumulatePassKeys(t.R, t.kv.seq_stride * sizeof(T), t.dv * sizeof(T))) {
    for (std::int64_t c = 0; c < kBc; ++c) V_wide_[c] = x.V + c * dv_pad_;
  }
  void Accumulate(const BlockRows& rows, std::int64_t h, float* P, const float* alpha, float* O,
                  LineRequests& next_values, bool hides_keys) const {
    const T* V[kBc];
    const auto* base = static_cast<const T*>(t_.kv.v) + h * t_.head_stride;
    for (std::int64_t c = 0; c < kBc; ++c) V[c] = base + rows.offset[c];
    constexpr bool kScaledWeights = CacheElementTraits<T>::kQuantized && std::is_same_v<Scales, RowScales>;
    if constexpr (kScaledWeights) {  // P̃_j·scale_v[j]
      alignas(64) float v_scale_h[kBc];
      GatherRowScales<T>(t_.scales.v, rows, h * t_.scales.head_stride, v_scale_h);
      ScaleScores(P, t_.R, nullptr, v_scale_h);
    }
    // The rows widened as the tiles would load them (scaled weights: unscaled rows), so that the pairs a row
    // sees get the products of the tiles
    if (CacheElementTraits<T>::kMayHoldNonFinite && hides_keys && HasNonFiniteRow(V, rows.cols, t_.dv)) {
      if constexpr (kScaledWeights) {
        for (std::int64_t c = 0; c < rows.cols; ++c) WidenRow(V[c], t_.dv, dv_pad_, x_.V + c * dv_pad_);
      } else {
        WidenValueRows<T>(t_, rows, h, dv_pad_, next_values, x_.V);
      }
      return AccumulateSeenValues(t_, rows, P, alpha, V_wide_, dv_pad_, O, dv_pad_);
    }
    const Scales v_scales = TileScalesOf<Scales>(t_.scales.v, rows, t_).ForHead(h);
    AccumulateBlock(P, alpha, V, t_.R, rows.cols, t_.dv, O, dv_pad_, pass_keys_, v_scales,
                    ValueLineRequests{&next_values, LinesOf<T>(t_.dv)});
  }

 private:
  const ChunkTask& t_;
  const AttendScratch& x_;
  const std::int64_t dv_pad_, pass_keys_;
  const float* V_wide_[kBc];
};

template <typename T>
class WidenedValues {
 public:
  WidenedValues(const ChunkTask& t, const AttendScratch& x) : t_(t), x_(x), dv_pad_(PaddedToLanes(t.dv)) {
    std::fill(x.V, x.V + kBc * dv_pad_, 0.0f);  // rows past a short block stay finite
    for (std::int64_t c = 0; c < kBc; ++c) V_wide_[c] = x.V + c * dv_pad_;
  }
  void Accumulate(const BlockRows& rows, std::int64_t h, float* P, const float* alpha, float* O,
                  LineRequests& next_values, bool hides_keys) const {
    WidenValueRows<T>(t_, rows, h, dv_pad_, next_values, x_.V);
    if (CacheElementTraits<T>::kMayHoldNonFinite && hides_keys && HasNonFiniteRow(V_wide_, rows.cols, dv_pad_)) {
      return AccumulateSeenValues(t_, rows, P, alpha, V_wide_, dv_pad_, O, dv_pad_);
    }
    AccumulateBlock(P, alpha, V_wide_, t_.R, rows.cols, dv_pad_, O, dv_pad_, kBc, RowScales(), kNoPassRequests);
  }

 private:
  const ChunkTask& t_;
  const AttendScratch& x_;
  const std::int64_t dv_pad_;
  const float* V_wide_[kBc];
};

// An int8 cache with one scale per row only. Targets whose integer sums read the int8 rows only in whole vectors
// (!kIntegerPvReadsRawRows) take them widened (unscaled) when dv leaves a partial vector.
class IntegerValues {
 public:
  IntegerValues(const ChunkTask& t, const AttendScratch& x)
      : t_(t), x_(x), dv_pad_(PaddedToLanes(t.dv)), widen_(!kIntegerPvReadsRawRows && t.dv != dv_pad_) {
    if (widen_) std::fill(x.V, x.V + kBc * dv_pad_, 0.0f);
    for (std::int64_t c = 0; c < kBc; ++c) V_wide_[c] = x.V + c * dv_pad_;
  }
  void Accumulate(const BlockRows& rows, std::int64_t h, float* P, const float* alpha, float* O,
                  LineRequests& next_values, bool) const {
    const std::int8_t* V[kBc];
    const auto* base = static_cast<const std::int8_t*>(t_.kv.v) + h * t_.head_stride;
    for (std::int64_t c = 0; c < kBc; ++c) V[c] = base + rows.offset[c];
    alignas(64) float v_scale_h[kBc];
    GatherRowScales<std::int8_t>(t_.scales.v, rows, h * t_.scales.head_stride, v_scale_h);
    const ValueLineRequests requests{&next_values, LinesOf<std::int8_t>(t_.dv)};
    if (widen_) {
      for (std::int64_t c = 0; c < rows.cols; ++c) WidenRow(V[c], t_.dv, dv_pad_, x_.V + c * dv_pad_);
      requests(0, rows.cols);
      IntegerAccumulateBlock(P, v_scale_h, alpha, V, V_wide_, t_.R, rows.cols, t_.dv, dv_pad_, O, x_.pv, kBc,
                             kNoPassRequests);
    } else {
      IntegerAccumulateBlock(P, v_scale_h, alpha, V, nullptr, t_.R, rows.cols, t_.dv, dv_pad_, O, x_.pv,
                             AccumulatePassKeys(t_.R, t_.kv.seq_stride, t_.dv), requests);
    }
  }

 private:
  const ChunkTask& t_;
  const AttendScratch& x_;
  const std::int64_t dv_pad_;
  const bool widen_;
  const float* V_wide_[kBc];
};

}  // namespace flashattn::HWY_NAMESPACE::decode_kernel
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_DECODE_VALUE_PATHS_INL_H_
