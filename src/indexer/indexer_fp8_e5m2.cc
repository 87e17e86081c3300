// The lightning indexer over FP8 E5M2 caches, compiled for every Highway target (src/simd/dispatch.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "indexer/indexer_fp8_e5m2.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "indexer/indexer-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE {
void IndexerFp8E5M2(const IndexerParams& params) { indexer_kernel::IndexerT<Fp8E5M2>(params); }
}  // namespace flashattn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashattn {
HWY_EXPORT(IndexerFp8E5M2);
void indexer_kernel::IndexerFp8E5M2(const IndexerParams& params) { HWY_DYNAMIC_DISPATCH(IndexerFp8E5M2)(params); }
}  // namespace flashattn
#endif
