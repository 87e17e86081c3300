// The forward pass over a batch of attention problems laid out in the caller's memory:
//
//   O = softmax(scale · Q Kᵀ + bias, masked) V        per (batch, query head)
//
// One parameter struct describes the batch; one call computes all of it.
#ifndef FLASHATTN_FORWARD_H_
#define FLASHATTN_FORWARD_H_

#include <cstdint>
#include <string_view>

#include "flashattn/export.h"
#include "flashattn/types.h"

namespace flashattn {

// Which implementation computes the forward pass. The reference algorithms are the readable steps of the
// derivation in docs/algorithms.md (src/reference/); they are the oracle the fast kernels are tested against.
enum class Algorithm : std::uint8_t {
  kStandard,  // materializes S and P (Nq×Nk) per head
  kFlash1,    // FlashAttention-1: K/V blocks outer, Q blocks inner, O/l/m in main memory
  kFlash2,    // FlashAttention-2: Q blocks outer, unnormalized accumulator, one division, LSE
  kFused,     // the fast kernel: flash2's loop order in SIMD registers and cache, threaded (the default)
  kOracle,    // standard attention in float64 (inputs converted exactly), rounded once to the output type
};

// Every algorithm, in the order docs/algorithms.md derives them (the demo and the benchmarks iterate over it).
inline constexpr Algorithm kAllAlgorithms[] = {Algorithm::kStandard, Algorithm::kFlash1, Algorithm::kFlash2,
                                               Algorithm::kFused, Algorithm::kOracle};

// "standard", "flash1", "flash2", "fused", "oracle".
FLASHATTN_API std::string_view to_string(Algorithm algorithm);
// Parses the names to_string gives; throws Error naming `argument` otherwise.
FLASHATTN_API Algorithm parse_algorithm(std::string_view name, std::string_view argument = "algorithm");

// A batch of attention problems. Q is (batch, Nq, Hq, d), K is (batch, Nk, Hkv, d), V is (batch, Nk, Hkv,
// dv) and O is (batch, Nq, Hq, dv), each addressed through its own strides in elements of `dtype`. The
// heads, head dimensions, element type, score modifiers, dropout, tiling and threads are the inherited
// AttentionSettings (include/flashattn/types.h).
struct AttentionParams : AttentionSettings {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  // Optional log-sum-exp of each row's scores, natural log, float32, contiguous (batch, Hq, Nq).
  // −inf for a row that sees no key (s_h with an attention sink s_h).
  float* lse = nullptr;

  Strides q_strides, k_strides, v_strides, o_strides;

  std::int64_t batch = 1;
  std::int64_t seqlen_q = 0;  // Nq
  std::int64_t seqlen_k = 0;  // Nk

  MaskTensor mask;
  // Selected keys: (batch, Nq, Hkv, k) int32, contiguous; row i of K/V head g attends exactly
  // key_indices[b, i, g, :]. Not with a mask tensor, dropout or a backward pass.
  KeySelection key_indices;

  // Fills the strides for contiguous tensors in flash-attn's (batch, seq, head, dim) layout.
  FLASHATTN_API void set_contiguous_strides();
  // Fills the strides for contiguous tensors in PyTorch's (batch, head, seq, dim) layout.
  FLASHATTN_API void set_head_major_strides();
};

// Checks `params` and throws Error describing the first problem found. Every entry point calls it before
// touching any output; callers may use it to check a call without running it.
FLASHATTN_API void validate(const AttentionParams& params);

// Computes O (and LSE if requested) for every problem in `params`.
FLASHATTN_API void forward(const AttentionParams& params, Algorithm algorithm = Algorithm::kFused);

// The dropout keep mask of `params` (validated like forward(); dropout_p may be 0, then all ones):
// keep[((b·Hq + h)·Nq + i)·Nk + j] = 1 if element (b, h, i, j) of P is kept, 0 if dropped. For tests and
// debugging: the forward and backward passes regenerate it and never store it.
FLASHATTN_API void materialize_dropout_mask(const AttentionParams& params, std::uint8_t* keep);

}  // namespace flashattn

#endif  // FLASHATTN_FORWARD_H_
