// The Highway target a fused-kernel call would run on: FusedFloatLanes(), its float32 lanes per vector, and
// FusedTargetName(). The kernel's packed K panels are 2·L keys wide and its V rows are padded to L
// (src/forward/), so its traffic depends on L. Compiled for the same targets as the kernel
// (flashattn_compile_for_every_simd_target, cmake/simd_targets.cmake) and dispatched the same way, it follows
// every restriction of the dispatch, including the tests' own.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "io_model/fused_target.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::io_model {
namespace HWY_NAMESPACE {

std::int64_t FloatLanes() {
  return static_cast<std::int64_t>(hwy::HWY_NAMESPACE::Lanes(hwy::HWY_NAMESPACE::ScalableTag<float>()));
}

}  // namespace HWY_NAMESPACE
}  // namespace flashattn::io_model
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "io_model/io_model.h"
#include "simd/targets.h"

namespace flashattn::io_model {

HWY_EXPORT(FloatLanes);

std::int64_t FusedFloatLanes() { return HWY_DYNAMIC_DISPATCH(FloatLanes)(); }

std::string FusedTargetName() { return simd::TargetName(simd::DispatchedTarget()); }

}  // namespace flashattn::io_model
#endif  // HWY_ONCE
