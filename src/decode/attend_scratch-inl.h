// The working set of one AttendChunk call (attend-inl.h), per Highway target: carved once per thread from the
// call's one allocation (simd/scratch.h) before the cache is touched.
#if defined(FLASHATTN_DECODE_ATTEND_SCRATCH_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_DECODE_ATTEND_SCRATCH_INL_H_
#undef FLASHATTN_DECODE_ATTEND_SCRATCH_INL_H_
#else
#define FLASHATTN_DECODE_ATTEND_SCRATCH_INL_H_
#endif

#include <cstdint>

#include "decode/attend_tiles-inl.h"
#include "decode/integer_pv-inl.h"
#include "decode/integer_scores-inl.h"
#include "hwy/highway.h"
#include "simd/scratch.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE::decode_kernel {

// The float32 working set for `heads` K/V heads of R rows: Q in rows of d_pad floats (s·q, zero-padded), a
// block of K rows and one of V rows widened when a path widens them (kBc rows of d_pad and dv_pad floats),
// scores, Õ in rows of dv_pad, m, l, α; with integer scores (query_groups > 0 groups of features per row), Q
// quantized; with integer P̃ V, its rounded weights and sums.
struct AttendScratch {
  float* Q;      // heads·R rows
  float* K;      // kBc rows
  float* V;      // kBc rows
  float* S;      // heads·R × kBc scores, then P̃
  float* O;      // heads·R rows, the unnormalized Õ
  float* m;      // heads·R running maxima
  float* l;      // heads·R running sums
  float* alpha;  // R rescale factors of the current block
  QueryInt8 q_int8;
  IntegerPv pv;

  static AttendScratch Carve(simd::ScratchCarver& c, std::int64_t heads, std::int64_t R, std::int64_t d_pad,
                             std::int64_t dv_pad, std::int64_t query_groups, bool integer_pv) {
    const std::int64_t rows = heads * R;
    AttendScratch x;
    x.Q = c.Take<float>(rows * d_pad);
    x.K = c.Take<float>(kBc * d_pad);
    x.V = c.Take<float>(kBc * dv_pad);
    x.S = c.Take<float>(rows * kBc);
    x.O = c.Take<float>(rows * dv_pad);
    x.m = c.Take<float>(rows);
    x.l = c.Take<float>(rows);
    x.alpha = c.Take<float>(R);
    if (query_groups > 0) {
      x.q_int8.stride = QueryInt8Stride(d_pad);
      x.q_int8.groups = query_groups;
      x.q_int8.q = c.Take<std::int8_t>(rows * x.q_int8.stride);
      x.q_int8.scale = c.Take<float>(rows * query_groups);
      x.q_int8.offset = c.Take<std::int32_t>(rows * query_groups * kOffsetLanes);
#if HWY_TARGET == HWY_AVX3_DL
      // at most ⌈d_pad / groups / 16⌉ steps per group, of 64 bytes per block of rows
      const std::int64_t steps = StepsPerGroup((d_pad + query_groups - 1) / query_groups);
      x.q_int8.blocks = c.Take<std::int8_t>(heads * RowGroups(R) * query_groups * steps * 64);
#endif
    }
    if (integer_pv) {
      x.pv.u = c.Take<WeightCode>(R * kBc);
      x.pv.factor = c.Take<float>(R);
      if (!kIntegerPvReadsRawRows) x.pv.sum = c.Take<float>(R * dv_pad);
    }
    return x;
  }
};

}  // namespace flashattn::HWY_NAMESPACE::decode_kernel
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_DECODE_ATTEND_SCRATCH_INL_H_
