// The forward pass over a batch of attention problems laid out in the caller's memory:
//
//   O = softmax(scale · Q Kᵀ + bias, masked) V        per (batch, query head)
//
// One parameter struct describes the batch; one call computes all of it.
#ifndef FLASHATTN_FORWARD_H_
#define FLASHATTN_FORWARD_H_

#include <cstdint>
#include <string_view>
#include <vector>

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

  // Block-sparse attention (include/flashattn/types.h, docs/sparse_attention.md): only the listed key blocks
  // of each query block are visited. Requires the default block_position.
  BlockMask block_mask;
  // Optional document ids, int32 (batch, Nk), row stride document_ids_batch_stride (0 = Nk): query row i sits
  // at key position i + Nk − Nq and sees key j only if their documents are equal. An element predicate, as
  // causal: everywhere without a block mask, on partial blocks with one. Requires Nq ≤ Nk and the default
  // block_position.
  const std::int32_t* document_ids = nullptr;
  std::int64_t document_ids_batch_stride = 0;
  // Selected keys: (batch, Nq, Hkv, k) int32, contiguous; row i of K/V head g attends exactly
  // key_indices[b, i, g, :]. Not with a mask tensor, dropout, a block mask, document ids or a backward
  // pass.
  KeySelection key_indices;

  // Fills the strides for contiguous tensors in flash-attn's (batch, seq, head, dim) layout.
  FLASHATTN_API void set_contiguous_strides();
  // Fills the strides for contiguous tensors in PyTorch's (batch, head, seq, dim) layout.
  FLASHATTN_API void set_head_major_strides();
};

// The owning form of a BlockMask that create_block_mask builds: its lists as vectors; view() points a
// BlockMask (heads 1) at them, valid while this object lives and is not modified.
struct BlockMaskLists {
  std::int64_t block_size_q = 128, block_size_k = 128;
  std::int64_t batch = 0, query_blocks = 0, key_blocks = 0;
  std::vector<std::int32_t> kv_num_blocks, kv_indices;            // (batch, 1, query_blocks[, key_blocks])
  std::vector<std::int32_t> full_kv_num_blocks, full_kv_indices;  // the lists are key_blocks wide
  BlockMask view() const {
    BlockMask m;
    m.block_size_q = block_size_q, m.block_size_k = block_size_k, m.heads = 1;
    m.kv_num_blocks = kv_num_blocks.data(), m.kv_indices = kv_indices.data(), m.kv_width = key_blocks;
    m.full_kv_num_blocks = full_kv_num_blocks.data(), m.full_kv_indices = full_kv_indices.data();
    m.full_kv_width = key_blocks;
    return m;
  }
};

// The block mask of the element predicates causal, window (−1 unbounded) and document ids (null = none;
// int32 (batch, seqlen_k), row stride document_ids_batch_stride, 0 = seqlen_k), with the library's
// bottom-right alignment: a key block is full for a query block when every element of the pair is visible,
// partial when some but not all are, absent when none is. The lists are sorted ascending.
FLASHATTN_API BlockMaskLists create_block_mask(std::int64_t batch, std::int64_t seqlen_q, std::int64_t seqlen_k,
                                               std::int64_t block_size_q, std::int64_t block_size_k, bool causal,
                                               std::int64_t window_left, std::int64_t window_right,
                                               const std::int32_t* document_ids,
                                               std::int64_t document_ids_batch_stride);

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
