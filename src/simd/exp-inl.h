// Vector e^x for the online softmax and the backward pass's P = e^{S − LSE} (per Highway target; include
// after hwy/highway.h).
//
// Accuracy contract: max error 2 ulp (1 ulp measured, tests/kernel_exp_test.cc) for x in [−87.33, 88.37],
// i.e. wherever e^x is a normal float below 2^127.5. Below −87.33 (results under FLT_MIN, which the softmax
// never needs) it returns 0, and exactly 0 for −∞; above 88.37 it returns +∞. NaN gives NaN.
//
// Method (after Cephes expf): e^x = 2^n · e^r with n = round(x·log2 e) and r = x − n·ln 2, where ln 2 is split
// in two parts (Cody–Waite) so that r is exact to float precision; |r| ≤ ln2/2, and e^r = 1 + r + r²·p(r)
// with a degree-4 polynomial p fitted for relative error (worst 1.25 ulp from the exact e^x over the range,
// as with Cephes' degree 5; 1 ulp from std::exp rounded to float in the test). n is rounded by adding
// 1.5·2^23 + 127 in the same FMA that forms x·log2 e: the sum's low mantissa bits are then n + 127, the
// biased exponent of 2^n, so no rounding or conversion instruction is needed. On x86 those (with Highway's
// overflow fix-up of the conversion) were 6 of the 24 instructions, and the softmax spends them on the FMA
// ports the matrix products need (the measurements are in docs/performance.md).
#if defined(FLASHATTN_SIMD_EXP_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_SIMD_EXP_INL_H_
#undef FLASHATTN_SIMD_EXP_INL_H_
#else
#define FLASHATTN_SIMD_EXP_INL_H_
#endif

#include <limits>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Exp without its overflow test, for the softmax's S − max ≤ 0: the same result for x ≤ 88.37 and NaN,
// garbage above. The test's compare and select would take two of the FMA ports' instructions per vector.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V ExpOfNonPositive(D d, V x) {
  const hn::RebindToUnsigned<D> du;
  const V shifter = hn::Set(d, 12582912.0f + 127.0f);                 // 1.5·2^23 + 127
  const V t = hn::MulAdd(x, hn::Set(d, 1.44269504088896341f), shifter);  // low bits: n + 127
  const V n = hn::Sub(t, shifter);
  V r = hn::NegMulAdd(n, hn::Set(d, 0.693359375f), x);   // ln 2 = 0.693359375
  r = hn::NegMulAdd(n, hn::Set(d, -2.12194440e-4f), r);  //        − 2.12194440e-4
  V p = hn::Set(d, 1.3751760125e-3f);
  p = hn::MulAdd(p, r, hn::Set(d, 8.3689149469e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 4.1669525206e-2f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.6666518152e-1f));
  p = hn::MulAdd(p, r, hn::Set(d, 4.9999988079e-1f));
  const V e_r = hn::MulAdd(p, hn::Mul(r, r), hn::Add(r, hn::Set(d, 1.0f)));
  // 2^n for n in [−126, 127]: n + 127 shifted into the exponent field (the 1.5·2^23 above it shifts out).
  // Outside that range the bits are garbage and a select replaces the result; a NaN x makes e_r, and so
  // the product, NaN whatever the bits.
  const V two_n = hn::BitCast(d, hn::ShiftLeft<23>(hn::BitCast(du, t)));
  return hn::IfThenZeroElse(hn::Lt(x, hn::Set(d, -87.3365447f)), hn::Mul(e_r, two_n));  // ln FLT_MIN
}

// e^x for every x (the contract above).
template <class D, class V = hn::Vec<D>>
HWY_INLINE V Exp(D d, V x) {
  return hn::IfThenElse(hn::Gt(x, hn::Set(d, 88.3762626f)),  // (127.5)·ln 2
                        hn::Set(d, std::numeric_limits<float>::infinity()), ExpOfNonPositive(d, x));
}

}  // namespace flashattn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_SIMD_EXP_INL_H_
