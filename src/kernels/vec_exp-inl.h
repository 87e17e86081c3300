// Vector e^x for the online softmax (per Highway target; include after hwy/highway.h).
//
// Accuracy contract: max error 2 ulp (1 ulp measured, tests/kernel_exp_test.cc) for x in [−87.33, 88.37],
// i.e. wherever e^x is a normal float below 2^127.5. Below −87.33 (results under FLT_MIN, which the softmax
// never needs) it returns 0, and exactly 0 for −∞; above 88.37 it returns +∞. NaN gives NaN.
//
// Method (Cephes expf): e^x = 2^n · e^r with n = round(x·log2 e) and r = x − n·ln 2, where ln 2 is split in
// two parts (Cody–Waite) so that r is exact to float precision; |r| ≤ ln2/2, and e^r = 1 + r + r²·p(r)
// with the degree-5 minimax polynomial p. 2^n is built directly in the exponent field.
#if defined(FLASHATTN_KERNELS_VEC_EXP_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FLASHATTN_KERNELS_VEC_EXP_INL_H_
#undef FLASHATTN_KERNELS_VEC_EXP_INL_H_
#else
#define FLASHATTN_KERNELS_VEC_EXP_INL_H_
#endif

#include <limits>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class D, class V = hn::Vec<D>>
HWY_INLINE V Exp(D d, V x) {
  const hn::RebindToSigned<D> di;
  const V n = hn::Round(hn::Mul(x, hn::Set(d, 1.44269504088896341f)));  // log2 e
  V r = hn::NegMulAdd(n, hn::Set(d, 0.693359375f), x);                  // ln 2 = 0.693359375
  r = hn::NegMulAdd(n, hn::Set(d, -2.12194440e-4f), r);                 //        − 2.12194440e-4
  V p = hn::Set(d, 1.9875691500e-4f);
  p = hn::MulAdd(p, r, hn::Set(d, 1.3981999507e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 8.3334519073e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 4.1665795894e-2f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.6666665459e-1f));
  p = hn::MulAdd(p, r, hn::Set(d, 5.0000001201e-1f));
  const V e_r = hn::MulAdd(p, hn::Mul(r, r), hn::Add(r, hn::Set(d, 1.0f)));
  // 2^n for n in [−126, 127]: the biased exponent n + 127 shifted into place. Outside that range the
  // bits are garbage and the selects below replace the result.
#if HWY_TARGET == HWY_EMU128 || HWY_TARGET == HWY_SCALAR
  // The emulated targets convert with a C++ cast, undefined for NaN (UBSan); a NaN lane's e_r is NaN
  // whatever n is, so n = 0 there. Hardware conversions are defined for NaN and need no select.
  const V n_converted = hn::IfThenZeroElse(hn::IsNaN(n), n);
#else
  const V n_converted = n;
#endif
  const V two_n =
      hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n_converted), hn::Set(di, 127))));
  const V y = hn::Mul(e_r, two_n);
  const V too_small = hn::IfThenZeroElse(hn::Lt(x, hn::Set(d, -87.3365447f)), y);  // ln FLT_MIN
  return hn::IfThenElse(hn::Gt(x, hn::Set(d, 88.3762626f)),                          // (127.5)·ln 2
                        hn::Set(d, std::numeric_limits<float>::infinity()), too_small);
}

}  // namespace flashattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // FLASHATTN_KERNELS_VEC_EXP_INL_H_
