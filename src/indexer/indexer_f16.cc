// The lightning indexer over float16 caches, compiled for every Highway target (src/simd/dispatch.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "indexer/indexer_f16.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "indexer/indexer-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE {
void IndexerF16(const IndexerParams& params) { indexer_kernel::IndexerT<hwy::float16_t>(params); }
}  // namespace flashattn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashattn {
HWY_EXPORT(IndexerF16);
void indexer_kernel::IndexerF16(const IndexerParams& params) { HWY_DYNAMIC_DISPATCH(IndexerF16)(params); }
}  // namespace flashattn
#endif
