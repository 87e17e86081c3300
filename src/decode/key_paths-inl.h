// The key paths of the decode kernel (AttendBlocks, attend-inl.h), per Highway target: how the scores of a
// block of keys are formed, S_h = Q_h K_jᵀ for every K/V head h (R rows of kBc scores each, rows of head h
// from S + h·R·kBc, with s·q in Q), chosen once per call:
//   StraightKeys<T, Scales>  the cache's rows read straight into the register tiles (ScoreBlock), widened as
//                            they load; a quantized row's one scale multiplies its scores afterwards
//                            (RowScales), scales of groups of 2^k features the vectors as they load (GroupScales)
//   WidenedKeys<T>           the rows widened (dequantized) into zero-padded float32 rows first, head by head:
//                            head dims that leave a partial vector, and scale groups of other sizes
//   IntegerKeys              an int8 cache with int8 queries: exact integer dot products (integer_scores-inl.h)
// Each requests the next block's K lines at the pace it reads this block's (read_plan.h).
#if defined(FLASHATTN_DECODE_KEY_PATHS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_DECODE_KEY_PATHS_INL_H_
#undef FLASHATTN_DECODE_KEY_PATHS_INL_H_
#else
#define FLASHATTN_DECODE_KEY_PATHS_INL_H_
#endif

#include <algorithm>
#include <bit>
#include <cstdint>

#include "common/cache_element_traits.h"
#include "common/constants.h"
#include "decode/attend.h"
#include "decode/attend_scratch-inl.h"
#include "decode/attend_tiles-inl.h"
#include "decode/integer_scores-inl.h"
#include "decode/read_plan.h"
#include "hwy/highway.h"
#include "simd/convert-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE::decode_kernel {
using flashattn::decode_kernel::BlockRows;
using flashattn::decode_kernel::ChunkTask;
using flashattn::decode_kernel::LineRequests;

// The request callback of the score tiles: as a 64-byte line of `keys` K rows is read, as many lines of the
// next block's K.
struct KeyLineRequests {
  LineRequests* next;
  HWY_INLINE void operator()(std::int64_t, std::int64_t keys, std::int64_t, std::int64_t) const { next->Issue(keys); }
};

// Lines of `elements` elements of T.
template <typename T>
constexpr std::int64_t LinesOf(std::int64_t elements) {
  return (elements * static_cast<std::int64_t>(sizeof(T)) + 63) / 64;
}

// Head h's scales of the block's keys (one per row, from `head0` + the key's scale offset), times what LoadF32
// leaves out of the values (kWideningFactor); 0 past `cols`.
template <typename T>
HWY_INLINE void GatherRowScales(const float* head0, const BlockRows& rows, std::int64_t head_offset,
                                float* HWY_RESTRICT out) {
  for (std::int64_t c = 0; c < rows.cols; ++c) out[c] = head0[rows.scale_offset[c] + head_offset] * kWideningFactor<T>;
  std::fill(out + rows.cols, out + kBc, 0.0f);
}

// Rows r < H·R of s·q (float32, zero-padded to d_pad) from the task's gathered rows.
HWY_INLINE void ScaledQueryRows(const ChunkTask& t, std::int64_t d_pad, float* Q) {
  for (std::int64_t row = 0; row < t.heads * t.R; ++row) {
    WidenScaledRow(t.Q + row * t.d, t.d, d_pad, t.mods[0].scale, Q + row * d_pad);
  }
}

// n rounded up to whole float vectors.
HWY_INLINE std::int64_t PaddedToLanes(std::int64_t n) {
  return RoundUp(n, static_cast<std::int64_t>(hn::Lanes(DF())));
}

// The scales a quantized row's tiles apply as they load, for the block's keys and head 0: none (RowScales), or
// those of groups of 2^k features (GroupScales).
template <class Scales>
HWY_INLINE Scales TileScalesOf(const float* base, const BlockRows& rows, const ChunkTask& t) {
  if constexpr (std::is_same_v<Scales, RowScales>) {
    return RowScales();
  } else {
    const int log2_g = std::countr_zero(static_cast<std::uint64_t>(t.scales.group_size));
    return Scales{base, rows.scale_offset, t.scales.head_stride, 0, log2_g};
  }
}

template <typename T, class Scales>
class StraightKeys {
 public:
  StraightKeys(const ChunkTask& t, const AttendScratch& x) : t_(t), x_(x), d_pad_(PaddedToLanes(t.d)) {
    ScaledQueryRows(t, d_pad_, x.Q);
  }
  void Score(const BlockRows& rows, LineRequests& next_keys, float* S) const {
    const T* K[kBc];
    const auto* base = static_cast<const T*>(t_.kv.k);
    for (std::int64_t c = 0; c < kBc; ++c) K[c] = base + rows.offset[c];
    ScoreBlock(x_.Q, t_.heads, t_.R, d_pad_, K, t_.head_stride, t_.d, rows.cols, S,
               TileScalesOf<Scales>(t_.scales.k, rows, t_), KeyLineRequests{&next_keys});
    // a row's one scale: S_j = scale_k[j]·(q·k_j)
    if constexpr (CacheElementTraits<T>::kQuantized && std::is_same_v<Scales, RowScales>) {
      alignas(64) float k_scale_h[kBc];
      for (std::int64_t h = 0; h < t_.heads; ++h) {
        GatherRowScales<T>(t_.scales.k, rows, h * t_.scales.head_stride, k_scale_h);
        ScaleScores(S + h * t_.R * kBc, t_.R, nullptr, k_scale_h);
      }
    }
  }

 private:
  const ChunkTask& t_;
  const AttendScratch& x_;
  const std::int64_t d_pad_;
};

template <typename T>
class WidenedKeys {
 public:
  WidenedKeys(const ChunkTask& t, const AttendScratch& x) : t_(t), x_(x), d_pad_(PaddedToLanes(t.d)) {
    ScaledQueryRows(t, d_pad_, x.Q);
    std::fill(x.K, x.K + kBc * d_pad_, 0.0f);  // rows past a short block stay finite
    for (std::int64_t c = 0; c < kBc; ++c) K_wide_[c] = x.K + c * d_pad_;
  }
  void Score(const BlockRows& rows, LineRequests& next_keys, float* S) const {
    const auto* base = static_cast<const T*>(t_.kv.k);
    for (std::int64_t h = 0; h < t_.heads; ++h) {
      for (std::int64_t c = 0; c < rows.cols; ++c) {
        const T* row = base + h * t_.head_stride + rows.offset[c];
        if constexpr (CacheElementTraits<T>::kQuantized) {
          const float* scales = t_.scales.k + rows.scale_offset[c] + h * t_.scales.head_stride;
          DequantizeRow(row, t_.d, d_pad_, scales, t_.scales.group_size, x_.K + c * d_pad_);
        } else {
          WidenRow(row, t_.d, d_pad_, x_.K + c * d_pad_);
        }
        next_keys.Issue(LinesOf<T>(t_.d));
      }
      ScoreBlock(x_.Q + h * t_.R * d_pad_, 1, t_.R, d_pad_, K_wide_, 0, d_pad_, rows.cols, S + h * t_.R * kBc,
                 RowScales(), kNoLineRequests);
    }
  }

 private:
  const ChunkTask& t_;
  const AttendScratch& x_;
  const std::int64_t d_pad_;
  const float* K_wide_[kBc];
};

// An int8 cache only: the rows s·q quantized per scale group of the cache, K read straight whatever d and the
// groups are.
class IntegerKeys {
 public:
  IntegerKeys(const ChunkTask& t, const AttendScratch& x)
      : t_(t), d_pad_(PaddedToLanes(t.d)), q_int8_(x.q_int8) {
    ScaledQueryRows(t, d_pad_, x.Q);
    q_int8_.g = t.scales.group_size;
    QuantizeQueryRows(x.Q, t.heads, t.R, d_pad_, t.d, q_int8_);
  }
  void Score(const BlockRows& rows, LineRequests& next_keys, float* S) const {
    const std::int8_t* K[kBc];
    const float* k_scale[kBc];  // head 0's scales of each key
    const auto* base = static_cast<const std::int8_t*>(t_.kv.k);
    for (std::int64_t c = 0; c < kBc; ++c) {
      K[c] = base + rows.offset[c];
      k_scale[c] = t_.scales.k + rows.scale_offset[c];
    }
    IntegerScoreBlock(q_int8_, t_.heads, t_.R, K, t_.head_stride, k_scale, t_.scales.head_stride, t_.d, rows.cols,
                      S, KeyLineRequests{&next_keys});
  }

 private:
  const ChunkTask& t_;
  const std::int64_t d_pad_;
  QueryInt8 q_int8_;
};

}  // namespace flashattn::HWY_NAMESPACE::decode_kernel
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_DECODE_KEY_PATHS_INL_H_
