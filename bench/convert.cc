#include "bench/convert.h"

#include <cstring>

#include "common/element.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/convert.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::bench {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Full vectors through Highway, the tail through the scalar conversions of common/element.h.
void PromoteF16(const std::uint16_t* HWY_RESTRICT src, std::int64_t n, float* HWY_RESTRICT dst) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const auto* half = reinterpret_cast<const hwy::float16_t*>(src);
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  std::int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, half + i)), df, dst + i);
  for (; i < n; ++i) dst[i] = F32FromF16(src[i]);
}

void PromoteBF16(const std::uint16_t* HWY_RESTRICT src, std::int64_t n, float* HWY_RESTRICT dst) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::bfloat16_t, decltype(df)> dh;
  const auto* half = reinterpret_cast<const hwy::bfloat16_t*>(src);
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  std::int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, half + i)), df, dst + i);
  for (; i < n; ++i) dst[i] = F32FromBF16(src[i]);
}

void DemoteF16(const float* HWY_RESTRICT src, std::int64_t n, std::uint16_t* HWY_RESTRICT dst) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  auto* half = reinterpret_cast<hwy::float16_t*>(dst);
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  std::int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::DemoteTo(dh, hn::LoadU(df, src + i)), dh, half + i);
  for (; i < n; ++i) dst[i] = F16FromF32(src[i]);
}

}  // namespace HWY_NAMESPACE
}  // namespace flashattn::bench
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashattn::bench {

HWY_EXPORT(PromoteF16);
HWY_EXPORT(PromoteBF16);
HWY_EXPORT(DemoteF16);

void ConvertToF32(const void* src, DType dtype, std::int64_t n, float* dst) {
  const auto* bits = static_cast<const std::uint16_t*>(src);
  switch (dtype) {
    case DType::kF32: std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(float)); return;
    case DType::kF16: return HWY_DYNAMIC_DISPATCH(PromoteF16)(bits, n, dst);
    case DType::kBF16: return HWY_DYNAMIC_DISPATCH(PromoteBF16)(bits, n, dst);
  }
}

void ConvertFromF32(const float* src, std::int64_t n, DType dtype, void* dst) {
  auto* bits = static_cast<std::uint16_t*>(dst);
  switch (dtype) {
    case DType::kF32: std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(float)); return;
    case DType::kF16: return HWY_DYNAMIC_DISPATCH(DemoteF16)(src, n, bits);
    case DType::kBF16:  // Highway 1.0's DemoteTo truncates bfloat16; round to nearest even like the library
      for (std::int64_t i = 0; i < n; ++i) bits[i] = BF16FromF32(src[i]);
      return;
  }
}

}  // namespace flashattn::bench
#endif  // HWY_ONCE
