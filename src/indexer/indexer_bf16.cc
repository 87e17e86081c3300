// The lightning indexer over bfloat16 caches, compiled for every Highway target (src/simd/dispatch.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "indexer/indexer_bf16.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "indexer/indexer-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE {
void IndexerBF16(const IndexerParams& params) { indexer_kernel::IndexerT<hwy::bfloat16_t>(params); }
}  // namespace flashattn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashattn {
HWY_EXPORT(IndexerBF16);
void indexer_kernel::IndexerBF16(const IndexerParams& params) { HWY_DYNAMIC_DISPATCH(IndexerBF16)(params); }
}  // namespace flashattn
#endif
