// The row conversions of elements.h through the kernels' own element code (simd/convert-inl.h: the
// widening with its float16 inf/NaN correction, the scalar rounding), compiled for every target the
// kernels are and dispatched once per row.
#include "support/elements.h"

#include <algorithm>
#include <type_traits>

#include "common/element.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "support/elements.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "simd/convert-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::support::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace kn = flashattn::HWY_NAMESPACE;

template <typename T>
void RowToF32(const void* HWY_RESTRICT src, std::int64_t n, float* HWY_RESTRICT dst) {
  kn::WidenRow(static_cast<const T*>(src), n, n, dst);
}

// float16 narrows a vector at a time where the CPU converts natively (the kernels store O the same way);
// the rest element by element with the library's rounding to nearest even.
template <typename T>
void RowFromF32(const float* HWY_RESTRICT src, std::int64_t n, void* HWY_RESTRICT dst) {
  T* out = static_cast<T*>(dst);
  std::int64_t i = 0;
  if constexpr (std::is_same_v<T, hwy::float16_t> && kn::kNativeF16Widening) {
    const kn::DF df;
    const hn::Rebind<hwy::float16_t, kn::DF> df16;
    const std::int64_t L = static_cast<std::int64_t>(hn::Lanes(df));
    for (; i + L <= n; i += L) hn::StoreU(hn::DemoteTo(df16, hn::LoadU(df, src + i)), df16, out + i);
  }
  for (; i < n; ++i) out[i] = FromF32<T>(src[i]);
}

void F16ToF32(const void* src, std::int64_t n, float* dst) { RowToF32<hwy::float16_t>(src, n, dst); }
void BF16ToF32(const void* src, std::int64_t n, float* dst) { RowToF32<hwy::bfloat16_t>(src, n, dst); }
void F32ToF16(const float* src, std::int64_t n, void* dst) { RowFromF32<hwy::float16_t>(src, n, dst); }
void F32ToBF16(const float* src, std::int64_t n, void* dst) { RowFromF32<hwy::bfloat16_t>(src, n, dst); }

}  // namespace flashattn::support::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashattn::support {

HWY_EXPORT(F16ToF32);
HWY_EXPORT(BF16ToF32);
HWY_EXPORT(F32ToF16);
HWY_EXPORT(F32ToBF16);

float LoadAsFloat(const void* base, DType dtype, std::int64_t index) {
  return flashattn::LoadAsFloat(base, dtype, index);
}

void StoreFromFloat(void* base, DType dtype, std::int64_t index, float value) {
  flashattn::StoreFromFloat(base, dtype, index, value);
}

void ConvertToF32(const void* src, DType dtype, std::int64_t n, float* dst) {
  switch (dtype) {
    case DType::kF32: std::copy_n(static_cast<const float*>(src), n, dst); return;
    case DType::kF16: return HWY_DYNAMIC_DISPATCH(F16ToF32)(src, n, dst);
    case DType::kBF16: return HWY_DYNAMIC_DISPATCH(BF16ToF32)(src, n, dst);
  }
}

void ConvertFromF32(const float* src, std::int64_t n, DType dtype, void* dst) {
  switch (dtype) {
    case DType::kF32: std::copy_n(src, n, static_cast<float*>(dst)); return;
    case DType::kF16: return HWY_DYNAMIC_DISPATCH(F32ToF16)(src, n, dst);
    case DType::kBF16: return HWY_DYNAMIC_DISPATCH(F32ToBF16)(src, n, dst);
  }
}

}  // namespace flashattn::support
#endif  // HWY_ONCE
