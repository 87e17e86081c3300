// How every kernel is reached (forward, decode, backward): one dispatch per public call.
//
// A kernel is written once, as a template on the element type T in the kernel's -inl.h header. Each element
// type gets a translation unit of its own (<kernel>_f32.cc, _f16.cc, _bf16.cc: smaller, parallel compiles)
// that Highway's foreach_target.h compiles once per SIMD target (HWY_COMPILE_ALL_ATTAINABLE), each
// defining the per-target entry point <Kernel>F32 etc.; its HWY_ONCE part exports them (HWY_EXPORT) and
// defines the plain function of the same name that calls the best target of this CPU
// (HWY_DYNAMIC_DISPATCH). The kernel's plain header declares those three and picks one by the call's
// element type with CallForElementType below. Below the dispatch everything is per-target code calling
// per-target code directly: the thread team, its loops and the micro-kernels.
#ifndef FLASHATTN_SIMD_DISPATCH_H_
#define FLASHATTN_SIMD_DISPATCH_H_

#include "common/cache_element_traits.h"
#include "flashattn/flashattn.h"

namespace flashattn::simd {

// Calls the entry point of `dtype` among a kernel's three, each of which dispatches to the best target.
template <auto kF32, auto kF16, auto kBF16, typename... Args>
void CallForElementType(DType dtype, const Args&... args) {
  switch (dtype) {
    case DType::kF32: return kF32(args...);
    case DType::kF16: return kF16(args...);
    case DType::kBF16: return kBF16(args...);
  }
}

// Calls the entry point of a cache's element type: a float cache's by `dtype` among the first three, a quantized
// cache's as QuantizedEntry<Storage>::Call (its storage type's, from its traits; decode reads the cache through
// its element type, its queries are float32). A storage type without an entry point does not compile.
template <auto kF32, auto kF16, auto kBF16, template <typename> class QuantizedEntry, typename... Args>
void CallForCacheElement(CacheElement element, DType dtype, const Args&... args) {
  VisitCacheElement(element, [&](auto traits) {
    using Traits = decltype(traits);
    if constexpr (Traits::kQuantized) {
      QuantizedEntry<typename Traits::Storage>::Call(args...);
    } else {
      CallForElementType<kF32, kF16, kBF16>(dtype, args...);
    }
  });
}

}  // namespace flashattn::simd

#endif  // FLASHATTN_SIMD_DISPATCH_H_
