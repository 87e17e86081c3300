#include "bench/presets.h"

#include "support/fail.h"

namespace flashattn::bench {

namespace {

constexpr Mode kDecode = Mode::kDecode;
constexpr CacheElement kInt8 = CacheElement::kInt8;

// One query row per sequence. Grouped-query attention (32 query heads on 8 K/V heads, d = 128, 32768 keys) in
// every cache element type and arithmetic; one K/V head for 8 query heads over 131072 keys (multi-query);
// multi-head latent attention (128 heads on one latent K/V head, d = 576 with V the first 512 features); and a
// serving batch of 64 sequences of 256 to 8192 keys in pages of 16.
const BenchCase kDecodeRoofline[] = {
    {.mode = kDecode, .heads = 32, .heads_kv = 8, .seqlen_q = 1, .seqlen_k = 32768, .headdim = 128,
     .dtype = DType::kF16},
    {.mode = kDecode, .heads = 32, .heads_kv = 8, .seqlen_q = 1, .seqlen_k = 32768, .headdim = 128,
     .dtype = DType::kBF16},
    {.mode = kDecode, .heads = 32, .heads_kv = 8, .seqlen_q = 1, .seqlen_k = 32768, .headdim = 128,
     .dtype = DType::kF16, .cache_element = kInt8},
    {.mode = kDecode, .heads = 32, .heads_kv = 8, .seqlen_q = 1, .seqlen_k = 32768, .headdim = 128,
     .dtype = DType::kF16, .cache_element = kInt8, .scale_group_size = 32},
    {.mode = kDecode, .heads = 32, .heads_kv = 8, .seqlen_q = 1, .seqlen_k = 32768, .headdim = 128,
     .dtype = DType::kF16, .cache_element = kInt8, .quantize_query = true, .quantize_probs = true},
    // integer P̃V takes one scale per row: integer scores alone with groups
    {.mode = kDecode, .heads = 32, .heads_kv = 8, .seqlen_q = 1, .seqlen_k = 32768, .headdim = 128,
     .dtype = DType::kF16, .cache_element = kInt8, .quantize_query = true, .scale_group_size = 32},
    {.mode = kDecode, .heads = 32, .heads_kv = 8, .seqlen_q = 1, .seqlen_k = 32768, .headdim = 128,
     .dtype = DType::kF16, .cache_element = CacheElement::kFp8E4M3},
    {.mode = kDecode, .heads = 8, .heads_kv = 1, .seqlen_q = 1, .seqlen_k = 131072, .headdim = 128,
     .dtype = DType::kF16},
    {.mode = kDecode, .heads = 128, .heads_kv = 1, .seqlen_q = 1, .seqlen_k = 8192, .headdim = 576,
     .headdim_v = 512, .dtype = DType::kBF16},
    {.mode = kDecode, .batch = 64, .heads = 32, .heads_kv = 8, .seqlen_q = 1, .seqlen_k = 8192, .headdim = 128,
     .dtype = DType::kBF16, .page_size = 16, .cache_len_min = 256},
    {.mode = kDecode, .batch = 64, .heads = 32, .heads_kv = 8, .seqlen_q = 1, .seqlen_k = 8192, .headdim = 128,
     .dtype = DType::kBF16, .cache_element = kInt8, .page_size = 16, .cache_len_min = 256},
};

// Attention over selected keys (DeepSeek-V3.2's sparse attention): one MLA query row (128 heads on one latent
// K/V head, d = 576 with V the first 512 features, bf16) attending 2048 random distinct keys of 32768 and of
// 131072, each row timed beside dense decode over 2048 contiguous keys; then dense decode over all keys.
const BenchCase kSelectedMla[] = {
    {.mode = kDecode, .heads = 128, .heads_kv = 1, .seqlen_q = 1, .seqlen_k = 32768, .headdim = 576,
     .headdim_v = 512, .dtype = DType::kBF16, .top_k = 2048},
    {.mode = kDecode, .heads = 128, .heads_kv = 1, .seqlen_q = 1, .seqlen_k = 131072, .headdim = 576,
     .headdim_v = 512, .dtype = DType::kBF16, .top_k = 2048},
    {.mode = kDecode, .heads = 128, .heads_kv = 1, .seqlen_q = 1, .seqlen_k = 32768, .headdim = 576,
     .headdim_v = 512, .dtype = DType::kBF16},
    {.mode = kDecode, .heads = 128, .heads_kv = 1, .seqlen_q = 1, .seqlen_k = 131072, .headdim = 576,
     .headdim_v = 512, .dtype = DType::kBF16},
};

constexpr Mode kServe = Mode::kServe;

// Serving steps, one packed decode call each (GQA 32 query heads on 8 K/V heads, d = 128, bf16, pages of 16,
// causal): decode alone, decode beside two prefill chunks, and one long prefill chunk.
const BenchCase kServeDecode[] = {
    {.mode = kServe, .batch = 64, .heads = 32, .heads_kv = 8, .seqlen_q = 1, .seqlen_k = 8192, .headdim = 128,
     .causal = true, .dtype = DType::kBF16, .page_size = 16, .cache_len_min = 256},
};
const BenchCase kServeMixed[] = {
    {.mode = kServe, .batch = 48, .heads = 32, .heads_kv = 8, .seqlen_q = 512, .seqlen_k = 8192, .headdim = 128,
     .causal = true, .dtype = DType::kBF16, .page_size = 16, .cache_len_min = 256, .prefill_seqs = 2,
     .prefill_chunk = 512, .prefill_prefix = 4096},
};
const BenchCase kServeLongPrefill[] = {
    {.mode = kServe, .batch = 0, .heads = 32, .heads_kv = 8, .seqlen_q = 2048, .seqlen_k = 0, .headdim = 128,
     .causal = true, .dtype = DType::kBF16, .page_size = 16, .prefill_seqs = 1, .prefill_chunk = 2048,
     .prefill_prefix = 32768},
};

constexpr Mode kIndexer = Mode::kIndexer;

// DeepSeek-V3.2's lightning indexer: one query row (decoding) of 64 indexer heads, d_I = 128, bf16 queries,
// over 32768 and 131072 keys in bf16 and fp8 E4M3 (one scale per key), keeping 2048.
const BenchCase kIndexerCases[] = {
    {.mode = kIndexer, .heads = 64, .heads_kv = 1, .seqlen_q = 1, .seqlen_k = 32768, .headdim = 128,
     .causal = true, .dtype = DType::kBF16, .top_k = 2048},
    {.mode = kIndexer, .heads = 64, .heads_kv = 1, .seqlen_q = 1, .seqlen_k = 32768, .headdim = 128,
     .causal = true, .dtype = DType::kBF16, .cache_element = CacheElement::kFp8E4M3, .top_k = 2048},
    {.mode = kIndexer, .heads = 64, .heads_kv = 1, .seqlen_q = 1, .seqlen_k = 131072, .headdim = 128,
     .causal = true, .dtype = DType::kBF16, .top_k = 2048},
    {.mode = kIndexer, .heads = 64, .heads_kv = 1, .seqlen_q = 1, .seqlen_k = 131072, .headdim = 128,
     .causal = true, .dtype = DType::kBF16, .cache_element = CacheElement::kFp8E4M3, .top_k = 2048},
};

const Preset kPresets[] = {
    {.name = "decode-roofline",
     .description = "the decode cases judged by their roofline fraction: GQA over 32768 keys in f16, bf16, int8 "
                    "(per token, groups of 32, integer arithmetic) and fp8_e4m3; MQA over 131072 keys; MLA; a "
                    "paged batch of 64 sequences of 256-8192 keys in bf16 and int8",
     .threads = 2,
     .baseline = false,
     .cases = kDecodeRoofline},
    {.name = "selected-mla",
     .description = "MLA decode over 2048 selected keys (key_indices) of 32768 and 131072, against dense decode over "
                    "2048 contiguous keys (the ratio) and over all keys",
     .threads = 2,
     .baseline = false,
     .cases = kSelectedMla},
    {.name = "serve-decode",
     .description = "a serving step of 64 sequences decoding over 256-8192 cached keys (--mode serve)",
     .threads = 2,
     .baseline = false,
     .cases = kServeDecode},
    {.name = "serve-mixed",
     .description = "a serving step of 48 sequences decoding over 256-8192 keys and 2 prefill chunks of 512 rows "
                    "over 4096 keys",
     .threads = 2,
     .baseline = false,
     .cases = kServeMixed},
    {.name = "serve-long-prefill",
     .description = "one prefill chunk of 2048 rows over 32768 cached keys",
     .threads = 2,
     .baseline = false,
     .cases = kServeLongPrefill},
    {.name = "indexer",
     .description = "the lightning indexer of one query row, 64 heads of d 128, bf16, over 32768 and 131072 keys "
                    "in bf16 and fp8_e4m3, keeping 2048 (--mode indexer)",
     .threads = 2,
     .baseline = false,
     .cases = kIndexerCases},
};

}  // namespace

std::span<const Preset> Presets() { return kPresets; }

const Preset& FindPreset(std::string_view name, std::string_view argument) {
  for (const Preset& preset : kPresets)
    if (preset.name == name) return preset;
  std::string names;
  for (const Preset& preset : kPresets) names += (names.empty() ? "" : ", ") + std::string(preset.name);
  support::Fail(argument, " must be one of ", names, "; got '", name, "'");
}

std::string DescribePresets() {
  std::string text;
  for (const Preset& preset : kPresets) {
    text += (text.empty() ? "" : "; ") + std::string(preset.name) + ": " + std::string(preset.description);
  }
  return text;
}

}  // namespace flashattn::bench
