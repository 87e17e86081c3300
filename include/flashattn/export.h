// FLASHATTN_API marks what the library exports: every public function, and the classes whose members or
// type information live in the library. The library is compiled with hidden visibility, so a shared
// libflashattn exports these and nothing else (no internal namespace, no per-target SIMD code). The mark
// is the same when building the library and when using it, static or shared.
#ifndef FLASHATTN_EXPORT_H_
#define FLASHATTN_EXPORT_H_

#if defined(__GNUC__) || defined(__clang__)
#define FLASHATTN_API __attribute__((visibility("default")))
#else
#define FLASHATTN_API
#endif

#endif  // FLASHATTN_EXPORT_H_
