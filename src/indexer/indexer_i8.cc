// The lightning indexer over int8 caches, compiled for every Highway target (src/simd/dispatch.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "indexer/indexer_i8.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "indexer/indexer-inl.h"

HWY_BEFORE_NAMESPACE();
namespace flashattn::HWY_NAMESPACE {
void IndexerI8(const IndexerParams& params) { indexer_kernel::IndexerT<std::int8_t>(params); }
}  // namespace flashattn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashattn {
HWY_EXPORT(IndexerI8);
void indexer_kernel::IndexerI8(const IndexerParams& params) { HWY_DYNAMIC_DISPATCH(IndexerI8)(params); }
}  // namespace flashattn
#endif
