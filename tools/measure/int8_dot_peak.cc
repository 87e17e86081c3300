// The integer dot products of the int8 cache's decode (decode/integer_scores-inl.h, decode/integer_pv-inl.h),
// timed as the FMA peak is: kInt8DotChains independent chains per thread, on every thread, best trial. Each
// target runs the instruction the kernel's integer sums run on that target:
//   AVX3_DL  vpdpbusd: each int32 lane adds 4 products of unsigned by signed bytes;
//   SVE      SDOT: each int32 lane adds 4 products of signed bytes (the scores; P̃V runs on float FMAs there);
//   others   bytes widened to int16, multiplied in pairs into int32 lanes (ReorderWidenMulAccumulate: vpmaddwd
//            and vpaddd on x86, smlal on NEON); one product per step on the scalar target (whose P̃V runs on
//            float FMAs too).
// The int8 decode kernel alone compiles AVX3_DL (decode/decode_i8.cc); this file asks for it as well, so that
// its dispatch picks the target the kernel's picks.
#define HWY_WANT_AVX3_DL
#include "measure/measure.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "measure/int8_dot_peak.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::measure {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#undef FLASHATTN_MEASURE_SDOT  // set again for each target
#if HWY_TARGET & (HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128)
#define FLASHATTN_MEASURE_SDOT 1
#else
#define FLASHATTN_MEASURE_SDOT 0
#endif

static_assert(kInt8DotChains == 12, "one variable per chain");

// Each chain: x_c ← x_c + dot(u, s), where dot adds `products` products u·s to every int32 lane.
#define FLASHATTN_TWELVE_CHAINS(STEP) \
  STEP(x0) STEP(x1) STEP(x2) STEP(x3) STEP(x4) STEP(x5) STEP(x6) STEP(x7) STEP(x8) STEP(x9) STEP(x10) STEP(x11)

#if HWY_TARGET == HWY_AVX3_DL
// vpdpbusd as the kernel writes it (decode/integer_scores-inl.h, DotBytes): Highway 1.0.3's AVX3_DL target does
// not enable the intrinsic.
HWY_INLINE __m512i DotBytes(__m512i acc, __m512i u, __m512i s) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
  return acc;
}

Int8DotChainsRun Int8DotChains(std::int64_t iterations, std::uint8_t u, std::int8_t s) {
  const __m512i vu = _mm512_set1_epi8(static_cast<char>(u)), vs = _mm512_set1_epi8(s);
  __m512i x[kInt8DotChains];
  for (int c = 0; c < kInt8DotChains; ++c) x[c] = _mm512_set1_epi32(c + 1);
  for (std::int64_t n = 0; n < iterations; ++n) {
    HWY_UNROLL(12) for (int c = 0; c < kInt8DotChains; ++c) x[c] = DotBytes(x[c], vu, vs);
  }
  Int8DotChainsRun run{.lanes = 16, .products_per_lane = 4, .target = hwy::TargetName(HWY_TARGET),
                       .instruction = "vpdpbusd", .integer_pv = true};
  alignas(64) std::int32_t lanes[16];
  for (int c = 0; c < kInt8DotChains; ++c) {
    _mm512_store_si512(lanes, x[c]);
    for (std::int32_t lane : lanes) run.sum += lane;
  }
  return run;
}
#elif FLASHATTN_MEASURE_SDOT
Int8DotChainsRun Int8DotChains(std::int64_t iterations, std::uint8_t u, std::int8_t s) {
  // SDOT multiplies signed bytes: u < 128 here. The asm statement hides u from the compiler (no instruction),
  // so that it cannot form one product for all chains outside the loop.
  svint8_t vu = svdup_n_s8(static_cast<std::int8_t>(u));
  const svint8_t vs = svdup_n_s8(s);
  svint32_t x0 = svdup_n_s32(1), x1 = svdup_n_s32(2), x2 = svdup_n_s32(3), x3 = svdup_n_s32(4);
  svint32_t x4 = svdup_n_s32(5), x5 = svdup_n_s32(6), x6 = svdup_n_s32(7), x7 = svdup_n_s32(8);
  svint32_t x8 = svdup_n_s32(9), x9 = svdup_n_s32(10), x10 = svdup_n_s32(11), x11 = svdup_n_s32(12);
  for (std::int64_t n = 0; n < iterations; ++n) {
#define FLASHATTN_STEP(x)            \
  asm volatile("" : "+w"(vu));       \
  x = svdot_s32(x, vu, vs);
    FLASHATTN_TWELVE_CHAINS(FLASHATTN_STEP)
#undef FLASHATTN_STEP
  }
  Int8DotChainsRun run{.lanes = static_cast<std::int64_t>(svcntw()), .products_per_lane = 4,
                       .target = hwy::TargetName(HWY_TARGET), .instruction = "sdot", .integer_pv = false};
  const svbool_t all = svptrue_b32();
#define FLASHATTN_SUM(x) run.sum += svaddv_s32(all, x);
  FLASHATTN_TWELVE_CHAINS(FLASHATTN_SUM)
#undef FLASHATTN_SUM
  return run;
}
#else
// Hides v's value from the compiler without an instruction: otherwise the product of two loop-invariant
// vectors is formed once, outside the loop, and every chain adds that one product.
template <class V>
HWY_INLINE void HideValue(V& v) {
#if HWY_TARGET == HWY_SCALAR
  asm volatile("" : "+r"(v.raw));
#elif HWY_ARCH_X86
  asm volatile("" : "+v"(v.raw));
#elif HWY_ARCH_ARM
  asm volatile("" : "+w"(v.raw));
#endif
}

Int8DotChainsRun Int8DotChains(std::int64_t iterations, std::uint8_t u, std::int8_t s) {
  const hn::ScalableTag<std::int32_t> di;
#if HWY_TARGET == HWY_SCALAR
  const hn::Rebind<std::int16_t, decltype(di)> d16;  // one lane: a single product per step, as the kernel's
  constexpr int kProducts = 1;
#else
  const hn::Repartition<std::int16_t, decltype(di)> d16;  // two features per int32 lane
  constexpr int kProducts = 2;
#endif
  auto vu = hn::Set(d16, static_cast<std::int16_t>(u));
  const auto vs = hn::Set(d16, static_cast<std::int16_t>(s));
  // Where a target splits the pairs' sums over two accumulators (NEON), x<c>_odd holds the second; elsewhere
  // it stays 0 and folds away. Named variables, not arrays, so that the chains stay in registers.
#define FLASHATTN_INIT(x, c) auto x = hn::Set(di, c), x##_odd = hn::Zero(di);
  FLASHATTN_INIT(x0, 1) FLASHATTN_INIT(x1, 2) FLASHATTN_INIT(x2, 3) FLASHATTN_INIT(x3, 4)
  FLASHATTN_INIT(x4, 5) FLASHATTN_INIT(x5, 6) FLASHATTN_INIT(x6, 7) FLASHATTN_INIT(x7, 8)
  FLASHATTN_INIT(x8, 9) FLASHATTN_INIT(x9, 10) FLASHATTN_INIT(x10, 11) FLASHATTN_INIT(x11, 12)
#undef FLASHATTN_INIT
  for (std::int64_t n = 0; n < iterations; ++n) {
#define FLASHATTN_STEP(x) \
  HideValue(vu);          \
  x = hn::ReorderWidenMulAccumulate(di, vu, vs, x, x##_odd);
    FLASHATTN_TWELVE_CHAINS(FLASHATTN_STEP)
#undef FLASHATTN_STEP
  }
  Int8DotChainsRun run{.lanes = static_cast<std::int64_t>(hn::Lanes(di)), .products_per_lane = kProducts,
                       .target = hwy::TargetName(HWY_TARGET),
                       .instruction = HWY_TARGET == HWY_SCALAR ? "int16 multiply-add"
                                      : HWY_ARCH_X86          ? "pmaddwd + paddd"
                                                              : "smlal",
                       .integer_pv = HWY_TARGET != HWY_SCALAR};
  HWY_ALIGN std::int32_t lanes[hn::MaxLanes(di)];
#define FLASHATTN_SUM(x)                      \
  hn::Store(hn::Add(x, x##_odd), di, lanes);  \
  for (std::size_t i = 0; i < hn::Lanes(di); ++i) run.sum += lanes[i];
  FLASHATTN_TWELVE_CHAINS(FLASHATTN_SUM)
#undef FLASHATTN_SUM
  return run;
}
#endif

}  // namespace HWY_NAMESPACE
}  // namespace flashattn::measure
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "measure/peak_trials.h"

namespace flashattn::measure {

HWY_EXPORT(Int8DotChains);

Int8DotChainsRun RunInt8DotChains(std::int64_t iterations, std::uint8_t u, std::int8_t s) {
  Int8DotChainsRun run = HWY_DYNAMIC_DISPATCH(Int8DotChains)(iterations, u, s);
  run.ops = 2.0 * static_cast<double>(run.products_per_lane * run.lanes) * kInt8DotChains *
            static_cast<double>(iterations);
  return run;
}

std::vector<std::int64_t> Int8DotTargets() { return hwy::SupportedAndGeneratedTargets(); }

Int8DotPeak MeasureInt8DotPeak(int threads, double seconds) {
  const Int8DotChainsRun probe = RunInt8DotChains(1, 1, 0);
  Int8DotPeak peak{.threads = threads, .target = probe.target, .instruction = probe.instruction,
                   .integer_pv = probe.integer_pv};
  // s = 0: the chains keep their values, so that no lane ever overflows however long they run.
  const PeakRates rates = BestTrialRates(threads, seconds, [](std::int64_t iterations, double* ops) {
    const Int8DotChainsRun run = RunInt8DotChains(iterations, 1, 0);
    *ops = run.ops;
    return static_cast<double>(run.sum);
  });
  peak.gops = rates.wall_gops;
  peak.cpu_gops = rates.cpu_gops;
  return peak;
}

}  // namespace flashattn::measure
#endif  // HWY_ONCE
