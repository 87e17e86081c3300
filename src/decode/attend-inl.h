// AttendBlocks per Highway target: FlashAttention-2's inner loop over blocks of Bc keys for one chunk of one
// sequence (ChunkTask, attend.h), for the R query rows of every K/V head, as four named steps per block:
//   plan the reads       ReadPlan (read_plan.h): the block's rows, the next block's requests
//   score the block      S_h = Score(Q_h K_jᵀ) for every head            the key path (key_paths-inl.h)
//   update the softmax   modifiers, m_new = max(m, rowmax S), P̃ = e^{S − m_new}, l = e^{m − m_new} l + rowsum P̃
//   accumulate P̃ V       Õ = e^{m − m_new} Õ + P̃ V_j                       the value path (value_paths-inl.h)
// and at the end O = Õ / l, LSE = m + log l (NormalizeAndLse). Each K and V row is read from main memory once
// per chunk. The key path and the value path are types chosen once per call (WithPaths), so that no mode is
// tested inside the loop.
#if defined(FLASHATTN_DECODE_ATTEND_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_DECODE_ATTEND_INL_H_
#undef FLASHATTN_DECODE_ATTEND_INL_H_
#else
#define FLASHATTN_DECODE_ATTEND_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "common/cache_element_traits.h"
#include "common/constants.h"
#include "common/quantize.h"
#include "common/score.h"
#include "decode/attend.h"
#include "decode/attend_scratch-inl.h"
#include "decode/key_paths-inl.h"
#include "decode/read_plan.h"
#include "decode/value_paths-inl.h"
#include "hwy/highway.h"
#include "simd/online_softmax-inl.h"
#include "simd/score_modifiers-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE::decode_kernel {
using flashattn::decode_kernel::ReadPlan;

// Lines of the next block's V that the softmax of one row requests, so that requests go out while it runs too.
inline constexpr std::int64_t kSoftmaxRowRequests = 4;

// What a block's scores need beyond s·q·k, the same for every K/V head: `modifiers` (softcap, ALiBi, or a
// band boundary inside the block), and whether some row does not see some key (`hides_keys`).
struct BlockModifiers {
  bool modifiers, hides_keys;
};

// The running softmax of a chunk's rows: (m, l) and Õ per row in the scratch, from the empty state.
class ChunkSoftmax {
 public:
  ChunkSoftmax(const ChunkTask& t, const AttendScratch& x) : t_(t), x_(x), dv_pad_(PaddedToLanes(t.dv)) {
    const std::int64_t rows = t.heads * t.R;
    std::fill(x.m, x.m + rows, kNegInf);
    std::fill(x.l, x.l + rows, 0.0f);
    std::fill(x.O, x.O + rows * dv_pad_, 0.0f);
    modified_everywhere_ = t.alibi != nullptr;
    for (std::int64_t h = 0; h < t.heads * t.G; ++h) {
      modified_everywhere_ = modified_everywhere_ || t.mods[h].softcap > 0.0f || t.mods[h].alibi_slope != 0.0f;
    }
  }

  BlockModifiers Of(const BlockRows& rows) const {
    const bool seen_whole = t_.mods[0].BandCovers(0, t_.Nq, rows.j0, rows.j0 + rows.cols);
    return {modified_everywhere_ || !seen_whole, !seen_whole};
  }

  // Head h's scores S_h (R rows, kBc apart) → P̃ in place, its rows' (m, l) updated and their α in x.alpha.
  void Update(const BlockRows& rows, const BlockModifiers& block, std::int64_t h, LineRequests& next_values) const {
    float* S_h = x_.S + h * t_.R * kBc;
    if (block.modifiers) {
      for (std::int64_t g = 0; g < t_.G; ++g) {
        ApplyScoreModifiers(t_.mods[h * t_.G + g], 0, t_.Nq, rows.j0, rows.cols, S_h + g * t_.Nq * kBc, kBc);
      }
      if (t_.alibi != nullptr) SelectedKeysAlibi(rows, h, S_h);
    }
    for (std::int64_t r = 0; r < t_.R; ++r) {
      float* S_r = S_h + r * kBc;
      std::fill(S_r + rows.cols, S_r + kBc, kNegInf);  // keys past the block take no part
      next_values.Issue(kSoftmaxRowRequests);
      x_.alpha[r] = OnlineSoftmaxRow<SumUpdate::kFusedMultiplyAdd>(S_r, kBc, x_.m[h * t_.R + r], x_.l[h * t_.R + r]);
    }
  }
  float* Accumulator(std::int64_t h) const { return x_.O + h * t_.R * dv_pad_; }

  // S −= slope·|diagonal − j| for the selected keys' positions j, after softcap as ApplyScoreModifiers orders it.
  void SelectedKeysAlibi(const BlockRows& rows, std::int64_t h, float* S_h) const {
    const std::int32_t* j = t_.positions + rows.j0;
    for (std::int64_t g = 0; g < t_.G; ++g) {
      const float slope = t_.alibi[h * t_.G + g];
      for (std::int64_t i = 0; i < t_.Nq; ++i) {
        const std::int64_t diagonal = t_.mods[h * t_.G + g].Diagonal(i);
        float* S_r = S_h + (g * t_.Nq + i) * kBc;
        for (std::int64_t c = 0; c < rows.cols; ++c) S_r[c] -= slope * static_cast<float>(std::llabs(diagonal - j[c]));
      }
    }
  }

  // O = Õ / l and LSE = m + log l into the task's outputs.
  void Finish() const {
    for (std::int64_t row = 0; row < t_.heads * t_.R; ++row) {
      float* O_row = x_.O + row * dv_pad_;
      t_.lse[row] = NormalizeAndLse(O_row, dv_pad_, x_.m[row], x_.l[row]);
      std::copy(O_row, O_row + t_.dv, t_.O + row * t_.dv);
    }
  }

 private:
  const ChunkTask& t_;
  const AttendScratch& x_;
  const std::int64_t dv_pad_;
  bool modified_everywhere_ = false;
};

// One chunk with the key path Keys and the value path Values over a cache of T.
template <typename T, class Keys, class Values>
void AttendBlocks(const ChunkTask& t, const AttendScratch& x) {
  const Keys keys(t, x);
  const Values values(t, x);
  ChunkSoftmax softmax(t, x);
  for (ReadPlan plan(t, sizeof(T)); !plan.Done(); plan.Advance()) {
    const BlockRows& rows = plan.Block();
    keys.Score(rows, plan.NextKeys(), x.S);
    const BlockModifiers block = softmax.Of(rows);
    for (std::int64_t h = 0; h < t.heads; ++h) {
      softmax.Update(rows, block, h, plan.NextValues());
      values.Accumulate(rows, h, x.S + h * t.R * kBc, x.alpha, softmax.Accumulator(h), plan.NextValues(),
                        block.hides_keys);
    }
  }
  softmax.Finish();
}

// The pair of paths of a call, as types.
template <class Keys, class Values>
struct Paths {
  using KeyPath = Keys;
  using ValuePath = Values;
};

// Calls run(Paths<…>()) with the key and value paths of a call over a cache of T (p's element type): rows read
// straight when d and dv fill whole vectors, else widened; a quantized cache's scale groups of 2^k features
// holding whole vectors or half of one applied in the tiles (else its rows are dequantized as they are
// widened); an int8 cache's integer options where asked. Only the valid pairs are instantiated.
template <typename T, class Run>
void WithPaths(const DecodeParams& p, const Run& run) {
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(DF()));
  const std::int64_t d = p.head_dim, dv = p.value_head_dim();
  const bool whole_vectors = d % N == 0 && dv % N == 0;
  if constexpr (!CacheElementTraits<T>::kQuantized) {
    if (!whole_vectors) return run(Paths<WidenedKeys<T>, WidenedValues<T>>());
    return run(Paths<StraightKeys<T, RowScales>, StraightValues<T, RowScales>>());
  } else {
    const std::int64_t g = ScaleGroupSize(p.scale_group_size, d);
    const bool power_of_two = (g & (g - 1)) == 0;
    const bool groups_in_tiles = g != d && power_of_two && (g % N == 0 || 2 * g == N);
    constexpr bool kInt8 = CacheElementTraits<T>::kIntegerDots;
    // Keys: integer scores where asked, else the float path of the scale kind; values likewise.
    const auto with_keys = [&](auto float_keys, auto float_values, auto integer_values) {
      using FloatKeys = typename decltype(float_keys)::type;
      using FloatValues = typename decltype(float_values)::type;
      const auto with_values = [&](auto keys) {
        using Keys = typename decltype(keys)::type;
        if constexpr (kInt8 && !std::is_void_v<typename std::decay_t<decltype(integer_values)>::type>) {
          if (p.quantize_probs_u8) return run(Paths<Keys, IntegerValues>());
        }
        return run(Paths<Keys, FloatValues>());
      };
      if constexpr (kInt8) {
        if (p.quantize_query_int8) return with_values(std::type_identity<IntegerKeys>());
      }
      return with_values(std::type_identity<FloatKeys>());
    };
    using NoIntegerValues = std::type_identity<void>;
    using IntegerValuesOf = std::type_identity<IntegerValues>;
    if (!whole_vectors || (g != d && !groups_in_tiles)) {
      return with_keys(std::type_identity<WidenedKeys<T>>(), std::type_identity<WidenedValues<T>>(),
                       IntegerValuesOf());
    }
    if (g == d) {
      return with_keys(std::type_identity<StraightKeys<T, RowScales>>(),
                       std::type_identity<StraightValues<T, RowScales>>(), IntegerValuesOf());
    }
    if (g >= N) {
      return with_keys(std::type_identity<StraightKeys<T, GroupScales<1>>>(),
                       std::type_identity<StraightValues<T, GroupScales<1>>>(), NoIntegerValues());
    }
    return with_keys(std::type_identity<StraightKeys<T, GroupScales<2>>>(),
                     std::type_identity<StraightValues<T, GroupScales<2>>>(), NoIntegerValues());
  }
}

}  // namespace flashattn::HWY_NAMESPACE::decode_kernel
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_DECODE_ATTEND_INL_H_
