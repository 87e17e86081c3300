// The lightning indexer over float32 caches, compiled for every Highway target (src/simd/dispatch.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "indexer/indexer_f32.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "indexer/indexer-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE {
void IndexerF32(const IndexerParams& params) { indexer_kernel::IndexerT<float>(params); }
}  // namespace flashattn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashattn {
HWY_EXPORT(IndexerF32);
void indexer_kernel::IndexerF32(const IndexerParams& params) { HWY_DYNAMIC_DISPATCH(IndexerF32)(params); }
}  // namespace flashattn
#endif
