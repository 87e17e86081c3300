#include "bench/baseline_softmax.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/baseline_softmax.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::bench {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

float SafeSoftmaxRowImpl(float* HWY_RESTRICT row, std::int64_t visible, std::int64_t n) {
  std::memset(row + visible, 0, static_cast<std::size_t>(n - visible) * sizeof(float));
  if (visible == 0) return -std::numeric_limits<float>::infinity();
  const hn::ScalableTag<float> df;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  const std::int64_t full = visible / N * N;

  // Pass 1: m = max_j S_j.
  auto vmax = hn::Set(df, -std::numeric_limits<float>::infinity());
  for (std::int64_t j = 0; j < full; j += N) vmax = hn::Max(vmax, hn::LoadU(df, row + j));
  float m = hn::GetLane(hn::MaxOfLanes(df, vmax));
  for (std::int64_t j = full; j < visible; ++j) m = std::max(m, row[j]);

  // Pass 2: P̃_j = exp(S_j − m), l = Σ_j P̃_j.
  const auto vm = hn::Set(df, m);
  auto vsum = hn::Zero(df);
  for (std::int64_t j = 0; j < full; j += N) {
    const auto p = hn::Exp(df, hn::Sub(hn::LoadU(df, row + j), vm));
    hn::StoreU(p, df, row + j);
    vsum = hn::Add(vsum, p);
  }
  float l = hn::GetLane(hn::SumOfLanes(df, vsum));
  for (std::int64_t j = full; j < visible; ++j) {
    row[j] = std::exp(row[j] - m);
    l += row[j];
  }

  // Pass 3: P_j = P̃_j / l.
  const float inv_l = 1.0f / l;
  const auto vinv = hn::Set(df, inv_l);
  for (std::int64_t j = 0; j < full; j += N) hn::StoreU(hn::Mul(hn::LoadU(df, row + j), vinv), df, row + j);
  for (std::int64_t j = full; j < visible; ++j) row[j] *= inv_l;
  return m + std::log(l);
}

void ExpShiftedRowImpl(float* HWY_RESTRICT row, std::int64_t visible, std::int64_t n, float shift) {
  if (!(shift > -std::numeric_limits<float>::infinity())) visible = 0;  // a row that saw no key: P = 0
  std::memset(row + visible, 0, static_cast<std::size_t>(n - visible) * sizeof(float));
  const hn::ScalableTag<float> df;
  const std::int64_t N = static_cast<std::int64_t>(hn::Lanes(df));
  const std::int64_t full = visible / N * N;
  const auto vshift = hn::Set(df, shift);
  for (std::int64_t j = 0; j < full; j += N)
    hn::StoreU(hn::Exp(df, hn::Sub(hn::LoadU(df, row + j), vshift)), df, row + j);
  for (std::int64_t j = full; j < visible; ++j) row[j] = std::exp(row[j] - shift);
}

}  // namespace HWY_NAMESPACE
}  // namespace flashattn::bench
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashattn::bench {

HWY_EXPORT(SafeSoftmaxRowImpl);
HWY_EXPORT(ExpShiftedRowImpl);

float SafeSoftmaxRow(float* row, std::int64_t visible, std::int64_t n) {
  return HWY_DYNAMIC_DISPATCH(SafeSoftmaxRowImpl)(row, visible, n);
}

void ExpShiftedRow(float* row, std::int64_t visible, std::int64_t n, float shift) {
  HWY_DYNAMIC_DISPATCH(ExpShiftedRowImpl)(row, visible, n, shift);
}

}  // namespace flashattn::bench
#endif  // HWY_ONCE
