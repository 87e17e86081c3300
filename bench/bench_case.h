// One benchmark configuration: what `flashattn bench` times, and the quantities derived from its shape alone
// (name, FLOP count, bytes a decode call must read).
#ifndef FLASHATTN_BENCH_BENCH_CASE_H_
#define FLASHATTN_BENCH_BENCH_CASE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flashattn/flashattn.h"

namespace flashattn::bench {

enum class Mode : std::uint8_t { kForward, kDecode, kBackward, kServe, kIndexer };

std::string_view ToString(Mode mode);
// Parses "forward", "decode", "backward", "serve", "indexer"; throws Error naming `argument` for anything else.
Mode ParseMode(std::string_view name, std::string_view argument = "--mode");

// Parses "f32", "f16", "bf16"; throws Error naming `argument` for anything else.
DType ParseDType(std::string_view name, std::string_view argument = "--dtype");

// Parses "int8", "fp8_e4m3", "fp8_e5m2" (the quantized caches of decode and serve); throws Error naming
// `argument` otherwise.
CacheElement ParseCacheElement(std::string_view name, std::string_view argument = "--cache-dtype");

// Block-sparse attention of the forward and backward modes (--sparse): none, 8 equal documents (causal within
// each, a BlockMask from create_block_mask and the document ids), or a causal sliding window of 512 keys with
// the first 64 keys global (seen by every later query; a BlockMask of 64 × 64 blocks built in bench/sparse.cc).
enum class Sparsity : std::uint8_t { kNone, kDocuments, kSlidingGlobal };
std::string_view ToString(Sparsity sparsity);  // "none", "documents", "sliding"
// Parses those names; throws Error naming `argument` for anything else.
Sparsity ParseSparsity(std::string_view name, std::string_view argument = "--sparse");

// Decode's cache lengths: one for every sequence (min = 0), or each sequence's drawn from [min, max].
struct CacheLenRange {
  std::int64_t min = 0;
  std::int64_t max = 0;
};
// Parses "N" or "A:B", integers with 1 ≤ A ≤ B (and N ≥ 1) that fit in int32; throws Error naming `argument` and
// the text otherwise.
CacheLenRange ParseCacheLen(std::string_view text, std::string_view argument = "--cache-len");

// A serving step's sequences of one kind: `count` of them, each with the two numbers of its option.
struct ServeGroup {
  std::int64_t count = 0;
  std::int64_t first = 0;   // --decoding: the shortest cache; --prefilling: the chunk's query rows C
  std::int64_t second = 0;  // --decoding: the longest cache; --prefilling: the cached prefix P
};
// Parses "N:A:B" (--decoding: N ≥ 1 sequences of one new row over A ≤ B drawn cached keys, A ≥ 1) or
// "M:C:P" (--prefilling: M ≥ 1 chunks of C ≥ 1 rows over a prefix of P ≥ 0 keys), integers that fit in int32;
// throws Error naming `argument`, the expected form and the text otherwise.
ServeGroup ParseDecoding(std::string_view text, std::string_view argument = "--decoding");
ServeGroup ParsePrefilling(std::string_view text, std::string_view argument = "--prefilling");

struct BenchCase {
  Mode mode = Mode::kForward;
  std::int64_t batch = 1;
  std::int64_t heads = 8;     // Hq
  std::int64_t heads_kv = 8;  // Hkv, divides Hq
  std::int64_t seqlen_q = 4096;  // decode: the new query rows per sequence (1 for plain decoding)
  std::int64_t seqlen_k = 4096;  // decode: the cache length N (keys already cached per sequence), or the longest
  std::int64_t headdim = 128;  // d
  // dv, of V and O; unset = d. Decode reads V as the first dv features of the K cache (v_cache == k_cache,
  // multi-head latent attention), so there dv ≤ d.
  std::optional<std::int64_t> headdim_v = std::nullopt;
  bool sinks = false;  // an attention sink per query head (forward, backward and decode)
  bool causal = false;
  Sparsity sparsity = Sparsity::kNone;  // forward and backward only
  DType dtype = DType::kF32;   // decode: of q, o and (unless quantized) the cache
  CacheElement cache_element = CacheElement::kFloat;  // decode and serve only: kFloat = a cache of dtype
  bool quantize_query = false;  // over an int8 cache only: integer scores (quantize_query_int8)
  bool quantize_probs = false;  // over an int8 cache only: u8-rounded weights of P̃V (quantize_probs_u8)
  std::int64_t scale_group_size = 0;  // over a quantized cache only: features per scale g (0 = one per row)
  int threads = 2;  // already resolved: never 0
  std::optional<Algorithm> algorithm = std::nullopt;  // forward only; unset: whatever flashattn::forward defaults to
  std::int64_t num_splits = 0;  // decode only: DecodeParams::num_splits (0 = choose_num_splits)
  std::int64_t page_size = 0;   // decode only: 0 = contiguous cache, else a paged cache with this page size
  // decode: attention over selected keys (DecodeParams::key_indices), each query row of each K/V head
  // attending top_k distinct random positions of its sequence (all of them when it holds fewer), 0 = every key;
  // indexer: the keys each query row keeps (heads are the indexer heads H_I, headdim d_I, seqlen_k the cached
  // keys of each sequence, dtype that of q and of a float key cache, cache_element a quantized one's), ≥ 1
  std::int64_t top_k = 0;
  // decode only: 0 = every sequence holds seqlen_k keys; else each holds a length drawn from
  // [cache_len_min, seqlen_k] with `seed` (CacheLengths)
  std::int64_t cache_len_min = 0;
  std::uint64_t seed = 1;
  // serve only: besides the `batch` decoding sequences (one row each over [cache_len_min, seqlen_k] drawn keys),
  // prefill_seqs chunks of prefill_chunk rows over a cached prefix of prefill_prefix keys; the chunk's own keys
  // are in the cache too (Nk = prefix + chunk), its rows causal, bottom-right aligned.
  std::int64_t prefill_seqs = 0;
  std::int64_t prefill_chunk = 0;
  std::int64_t prefill_prefix = 0;

  // "forward_default_f32_b1_h8_hkv8_nq4096_nk4096_d128_causal", "decode_default_f16_b1_h32_hkv8_nq1_nk32768_
  // d128_splits4_paged256", "decode_default_bf16_b64_h32_hkv8_nq1_nk256-8192_d128_paged16_seed1" (lengths drawn
  // from a range): unique per configuration.
  std::string Name() const;
  std::string AlgorithmName() const;  // "default" when unset
  std::int64_t ScaleGroups() const;   // a quantized cache's scales per (token, K/V head): d / g, or 1
  // The attention parameters of this case for contiguous (batch, seq, head, dim) tensors; pointers unset.
  // For the forward and backward modes (decode builds DecodeParams, see modes.h).
  AttentionParams Params() const;
};

// The keys cached for each of a decode case's sequences: seqlen_k each, or, with cache_len_min, each drawn
// uniformly from [cache_len_min, seqlen_k] as cache_len_min + x mod (seqlen_k − cache_len_min + 1) for the
// successive outputs x of std::mt19937_64(seed) (the same lengths on every platform).
std::vector<std::int64_t> CacheLengths(const BenchCase& c);
// One sequence of a serve case: its query rows and the keys in its cache (the chunk's own included).
struct ServeSequence {
  std::int64_t rows = 0;
  std::int64_t keys = 0;
};
// The decoding sequences first (1 row over each of CacheLengths), then the prefill chunks.
std::vector<ServeSequence> ServeSequences(const BenchCase& c);
// Σ of the cached keys a decode or serve call reads, each once, over all its sequences (with top_k: those one
// query row of a K/V head reads, min(top_k, length) per sequence).
std::int64_t TotalCacheLength(const BenchCase& c);
// Query rows of a decode (batch·Nq) or serve (Σ rows) call.
std::int64_t TotalQueryRows(const BenchCase& c);
// Σ over a call's query rows of the keys each row sees: decode Nq·TotalCacheLength (every row sees the whole
// cache); serve a decoding row its cache, prefill row i of a chunk P + i + 1 (causal).
double AttendedKeys(const BenchCase& c);

// The multiply-adds of a decode or serve call's two products, as FLOP: S = QKᵀ 2·Hq·attended·d, P̃V
// 2·Hq·attended·dv, attended = AttendedKeys.
struct DecodeFlops {
  double scores = 0;
  double pv = 0;
};
DecodeFlops CountDecodeFlops(const BenchCase& c);

// Floating-point operations credited to one call, by the usual conventions (exponentials and the softmax
// bookkeeping are not counted):
//   forward   2·b·h·Nq·Nk·(d + dv) (the products S = QKᵀ and PV), halved for causal;
//   backward  2.5× the forward count (flash-attn's convention: five products instead of two), causal halved;
//   decode    CountDecodeFlops: 2·h·Nq·keys·(d + dv), keys summed over the sequences (a decode call is bound by
//             memory unless many query rows share a K/V head; see CountBytesRead);
//   serve     CountDecodeFlops: 2·h·AttendedKeys·(d + dv);
//   indexer   2·H_I·d_I per (query row, key it sees): the score products q·k of every indexer head (the ReLU,
//             the weighted sum and the top-k are not counted).
double CountFlops(const BenchCase& c);

// Bytes a decode or serve call must move, for keys = TotalCacheLength (0 for the other modes):
//   the cache  keys·Hkv·(d + dv)·sizeof(dtype), each cached key and value once, or keys·Hkv·d·sizeof(dtype) when
//              V is inside the K rows; a quantized cache keys·Hkv·d bytes of K and as many of V (none when V is
//              inside K), plus their scales: 4 bytes per (key, K/V head, scale group) per token, else 4 per K/V
//              head;
//   q and o    rows·Hq·d and rows·Hq·dv elements of dtype, rows = TotalQueryRows.
double CountBytesRead(const BenchCase& c);

}  // namespace flashattn::bench

#endif  // FLASHATTN_BENCH_BENCH_CASE_H_
