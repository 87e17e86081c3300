// One benchmark configuration: what `flashattn bench` times, and the quantities derived from its shape alone
// (name, FLOP count, bytes of inputs and outputs). Modes other than forward slot in here as they land.
#ifndef FLASHATTN_BENCH_BENCH_CASE_H_
#define FLASHATTN_BENCH_BENCH_CASE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "flashattn/flashattn.h"

namespace flashattn::bench {

enum class Mode : std::uint8_t { kForward };

std::string_view ToString(Mode mode);
// Parses "forward"; throws Error naming `argument` for anything else.
Mode ParseMode(std::string_view name, std::string_view argument = "--mode");

// Parses "f32", "f16", "bf16"; throws Error naming `argument` for anything else.
DType ParseDType(std::string_view name, std::string_view argument = "--dtype");

struct BenchCase {
  Mode mode = Mode::kForward;
  std::int64_t batch = 1;
  std::int64_t heads = 8;     // Hq
  std::int64_t heads_kv = 8;  // Hkv, divides Hq
  std::int64_t seqlen_q = 4096;
  std::int64_t seqlen_k = 4096;
  std::int64_t headdim = 128;  // d = dv
  bool causal = false;
  DType dtype = DType::kF32;
  int threads = 2;  // already resolved: never 0
  std::optional<Algorithm> algorithm;  // unset: whatever flashattn::forward defaults to

  // "forward_default_f32_b1_h8_hkv8_nq4096_nk4096_d128_causal": unique per configuration.
  std::string Name() const;
  std::string AlgorithmName() const;  // "default" when unset
  // The attention parameters of this case for contiguous (batch, seq, head, dim) tensors; pointers unset.
  AttentionParams Params() const;
};

// Floating-point operations credited to one call, by the usual convention: 4·b·h·Nq·Nk·d for the two
// matrix products of the forward pass (2·Nq·Nk·d each), halved for causal. Exponentials and the softmax
// bookkeeping are not counted.
double CountFlops(const BenchCase& c);

}  // namespace flashattn::bench

#endif  // FLASHATTN_BENCH_BENCH_CASE_H_
