// decode() per Highway target, for one element type T: the split-KV steps (decode.h, plain code) around
// the chunks, which the thread team runs in parallel with this target's AttendBlocks, its key and value paths
// chosen once for the call (WithPaths).
#if defined(FLASHATTN_DECODE_DECODE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_DECODE_DECODE_INL_H_
#undef FLASHATTN_DECODE_DECODE_INL_H_
#else
#define FLASHATTN_DECODE_DECODE_INL_H_
#endif

#include <omp.h>

#include <cstdint>

#include "common/constants.h"
#include "common/quantize.h"
#include "decode/attend-inl.h"
#include "decode/decode.h"
#include "flashattn/decode.h"
#include "hwy/highway.h"
#include "simd/scratch.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE::decode_kernel {
using flashattn::decode_kernel::KernelSequences;
using flashattn::decode_kernel::SplitKv;

template <typename T>
void DecodeT(const DecodeParams& p, const KernelSequences& sequences) {
  SplitKv call(p, sequences);
  const std::int64_t lanes = static_cast<std::int64_t>(hn::Lanes(hn::ScalableTag<float>()));
  const std::int64_t d_pad = RoundUp(p.head_dim, lanes), dv_pad = RoundUp(p.value_head_dim(), lanes);
  // Scale groups per query row when the rows are quantized for integer scores
  const std::int64_t query_groups =
      p.quantize_query_int8 ? p.head_dim / ScaleGroupSize(p.scale_group_size, p.head_dim) : 0;
  const auto carve = [&](simd::ScratchCarver& c) {
    return AttendScratch::Carve(c, call.Heads(), call.RowsPerHead(), d_pad, dv_pad, query_groups,
                                p.quantize_probs_u8);
  };
  const simd::ScratchArena arena(call.Threads(), carve);  // all memory before the cache is touched
  if (!call.AppendAndGather()) return;
  WithPaths<T>(p, [&](auto paths) {
    using Keys = typename decltype(paths)::KeyPath;
    using Values = typename decltype(paths)::ValuePath;
#pragma omp parallel num_threads(call.Threads())
    {
      const AttendScratch x = arena.Share(omp_get_thread_num(), carve);
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t item = 0; item < call.Items(); ++item) AttendBlocks<T, Keys, Values>(call.Task(item), x);
    }
  });
  call.Merge();
}

}  // namespace flashattn::HWY_NAMESPACE::decode_kernel
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_DECODE_DECODE_INL_H_
