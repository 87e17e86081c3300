// One benchmark configuration: what `flashattn bench` times, and the quantities derived from its shape alone
// (name, FLOP count, bytes a decode call must read).
#ifndef FLASHATTN_BENCH_BENCH_CASE_H_
#define FLASHATTN_BENCH_BENCH_CASE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "flashattn/flashattn.h"

namespace flashattn::bench {

enum class Mode : std::uint8_t { kForward, kDecode, kBackward };

std::string_view ToString(Mode mode);
// Parses "forward", "decode", "backward"; throws Error naming `argument` for anything else.
Mode ParseMode(std::string_view name, std::string_view argument = "--mode");

// Parses "f32", "f16", "bf16"; throws Error naming `argument` for anything else.
DType ParseDType(std::string_view name, std::string_view argument = "--dtype");

// Parses "int8", "fp8_e4m3", "fp8_e5m2" (the quantized decode caches); throws Error naming `argument` otherwise.
CacheElement ParseCacheElement(std::string_view name, std::string_view argument = "--cache-dtype");

struct BenchCase {
  Mode mode = Mode::kForward;
  std::int64_t batch = 1;
  std::int64_t heads = 8;     // Hq
  std::int64_t heads_kv = 8;  // Hkv, divides Hq
  std::int64_t seqlen_q = 4096;  // decode: the new query rows per sequence (1 for plain decoding)
  std::int64_t seqlen_k = 4096;  // decode: the cache length N (keys already cached per sequence)
  std::int64_t headdim = 128;  // d
  // dv, of V and O; unset = d. Decode reads V as the first dv features of the K cache (v_cache == k_cache,
  // multi-head latent attention), so there dv ≤ d.
  std::optional<std::int64_t> headdim_v;
  bool sinks = false;  // an attention sink per query head (forward, backward and decode)
  bool causal = false;
  DType dtype = DType::kF32;   // decode: of q, o and (unless quantized) the cache
  CacheElement cache_element = CacheElement::kFloat;  // decode only: kFloat = a cache of dtype
  bool quantize_query = false;  // decode over an int8 cache only: integer scores (quantize_query_int8)
  bool quantize_probs = false;  // decode over an int8 cache only: u8-rounded weights of P̃V (quantize_probs_u8)
  std::int64_t scale_group_size = 0;  // decode over a quantized cache only: features per scale g (0 = one per row)
  int threads = 2;  // already resolved: never 0
  std::optional<Algorithm> algorithm;  // forward only; unset: whatever flashattn::forward defaults to
  std::int64_t num_splits = 0;  // decode only: DecodeParams::num_splits (0 = choose_num_splits)
  std::int64_t page_size = 0;   // decode only: 0 = contiguous cache, else a paged cache with this page size

  // "forward_default_f32_b1_h8_hkv8_nq4096_nk4096_d128_causal", "decode_default_f16_b1_h32_hkv8_nq1_nk32768_
  // d128_splits4_paged256": unique per configuration.
  std::string Name() const;
  std::string AlgorithmName() const;  // "default" when unset
  std::int64_t ScaleGroups() const;   // a quantized cache's scales per (token, K/V head): d / g, or 1
  // The attention parameters of this case for contiguous (batch, seq, head, dim) tensors; pointers unset.
  // For the forward and backward modes (decode builds DecodeParams, see modes.h).
  AttentionParams Params() const;
};

// Floating-point operations credited to one call, by the usual conventions (exponentials and the softmax
// bookkeeping are not counted):
//   forward   2·b·h·Nq·Nk·(d + dv) (the products S = QKᵀ and PV), halved for causal;
//   backward  2.5× the forward count (flash-attn's convention: five products instead of two), causal halved;
//   decode    2·b·h·Nq·N·(d + dv) (a decode call is bound by memory unless many query rows share a K/V head;
//             see CountBytesRead).
double CountFlops(const BenchCase& c);

// Bytes of K and V a decode call must read from its cache: b·N·Hkv·(d + dv)·sizeof(dtype), each cached key and
// value once, or b·N·Hkv·d·sizeof(dtype) when V is inside the K rows; a quantized cache 2·b·N·Hkv·d bytes plus
// its scales (4 bytes per key and K/V head per token, or per K/V head); 0 for the other modes.
double CountBytesRead(const BenchCase& c);

}  // namespace flashattn::bench

#endif  // FLASHATTN_BENCH_BENCH_CASE_H_
