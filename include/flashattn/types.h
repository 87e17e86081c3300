// The vocabulary every flashattn call shares: the error it throws, element types, tensor strides, the
// attention-mask tensor, tiling, the score modifiers, a call's position in a larger problem, the settings
// of the heads that every attention call has (HeadSettings, decode's too), and those the forward, varlen
// and backward calls add (AttentionSettings). No SIMD types: kernels are selected at run time inside the
// library.
#ifndef FLASHATTN_TYPES_H_
#define FLASHATTN_TYPES_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "flashattn/export.h"

namespace flashattn {

// Thrown for every invalid call. The message names the argument and the offending values. When it is
// thrown, nothing the caller owns has been written.
class FLASHATTN_API Error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
  // Defined in the library, which so holds the one vtable and type information of Error: a caller of a
  // shared libflashattn catches it by type.
  ~Error() override;
};

// Element type of Q, K, V and O. Accumulation is always float32 (float64 in the oracle).
enum class DType : std::uint8_t { kF32, kF16, kBF16 };

// "f32", "f16", "bf16".
FLASHATTN_API std::string_view to_string(DType dtype);
// Bytes per element: 4 or 2.
FLASHATTN_API std::size_t size_of(DType dtype);

// Element strides of a rank-4 tensor (batch, sequence, head, feature). The feature stride is always 1.
// Both flash-attn's (b, s, h, d) and PyTorch's (b, h, s, d) layouts are described by these three numbers.
struct Strides {
  std::int64_t batch = 0;
  std::int64_t seq = 0;
  std::int64_t head = 0;
};

// Optional attention-mask tensor in PyTorch's `attn_mask` sense, broadcast to (batch, Hq, Nq, Nk) by its
// strides (a stride of 0 repeats the element along that dimension).
enum class MaskKind : std::uint8_t {
  kNone,
  kBool,      // uint8 elements: non-zero = the key takes part, zero = masked out
  kAdditive,  // float32 elements added to the scores (−inf masks the key out)
};

struct MaskTensor {
  MaskKind kind = MaskKind::kNone;
  const void* data = nullptr;
  std::int64_t stride_batch = 0;
  std::int64_t stride_head = 0;
  std::int64_t stride_row = 0;
  std::int64_t stride_col = 1;
};

// Attention over selected keys: per (query row, K/V head) a list of `count` key positions, int32, −1 = unused.
// Each list is a set (no position twice) in any order; every query head of the K/V head's group attends exactly
// its keys. Positions are the sequence's (a paged cache's logical ones, before the block table), each one the
// row sees: inside the causal band or sliding window and the sequence, else the call is refused. A list of
// only −1 makes O = 0 and LSE = −∞ (the sink's logit with a sink). docs/sparse_attention.md.
struct KeySelection {
  const std::int32_t* indices = nullptr;  // null = every key (the dense call)
  std::int64_t count = 0;                 // k, the list length
  bool active() const { return indices != nullptr; }
};

// Block sizes of the tiled algorithms. Zero means "choose": the reference algorithms use FlashAttention's
// rule Bc = ⌈M / 4d⌉, Br = min(Bc, d) with M = fast_memory_bytes / 4 float32 elements (default
// kDefaultFastMemoryBytes; docs/algorithms.md derives it); the fused kernel derives its own from the
// detected cache sizes.
struct Tiling {
  std::int64_t fast_memory_bytes = 0;  // M, in bytes
  std::int64_t block_rows = 0;         // Br: query rows per Q block
  std::int64_t block_cols = 0;         // Bc: key rows per K/V block
};
inline constexpr std::int64_t kDefaultFastMemoryBytes = 256 * 1024;

// The largest head dimension d or dv of any call: 576 covers multi-head latent attention (DeepSeek-V2/V3,
// Kimi: d = 512 latent + 64 rotary features, dv = 512). It bounds the kernels' one-row stack buffers (4·576 bytes
// each: a query row widened and scaled, a K/V row widened while it is packed); the tiles and the scratch are
// sized per call from d and dv and the cache sizes, and do not limit it.
inline constexpr std::int64_t kMaxHeadDim = 576;

// What turns the products q·k of a query row and a key into the scores the softmax sees:
//   S = s·q·k,  then S ← c·tanh(S / c) (softcap),  then S += −slope·|i + Nk − Nq − j| (ALiBi),
// and −∞ for a key the masks hide. Query row i of a problem with Nq query rows and Nk keys is aligned with
// key position i + Nk − Nq (bottom-right, as in flash-attn): the queries are the last Nq positions.
struct ScoreSettings {
  std::optional<float> scale;  // s; default 1/√d
  // Causal mask: query row i sees key j iff j ≤ i + Nk − Nq.
  bool causal = false;
  // Sliding window (left, right), −1 = unbounded: i + Nk − Nq − left ≤ j ≤ i + Nk − Nq + right.
  std::int64_t window_left = -1;
  std::int64_t window_right = -1;
  // softcap c > 0: S ← c·tanh(S / c), after scaling and before ALiBi, mask tensors and masking. 0 disables it.
  float softcap = 0.0f;
  // ALiBi: S += −slope·|i + Nk − Nq − j|. float32 slopes of shape (Hq) when alibi_batch_stride is 0,
  // or (batch, Hq) with row stride alibi_batch_stride.
  const float* alibi_slopes = nullptr;
  std::int64_t alibi_batch_stride = 0;
  // Attention sinks: one learned logit s_h per query head, float32 (Hq), that joins every row's softmax
  // denominator and carries no value: LSE_i = log(Σ_j e^{S_ij} + e^{s_h}), P_ij = e^{S_ij − LSE_i}. A row that
  // sees no key then has O_i = 0 and LSE_i = s_h. Each s_h is finite or −∞ (−∞: no sink, bitwise); null = none.
  const float* sinks = nullptr;
};

// FlexAttention's BlockMask: per (batch, head, query block) lists of key blocks; int32, contiguous.
// Query row i is in query block i / block_size_q, key j in key block j / block_size_k (the last blocks may
// be partial). For query block r of (b, h): kv_indices[b, h, r, :kv_num_blocks[b, h, r]] are partial blocks,
// whose elements the call's element predicates still mask (causal, window, document ids, the mask tensor);
// full_kv_indices[b, h, r, :full_kv_num_blocks[b, h, r]] are seen whole (no predicate applies to them). Every
// other key block is masked out and never visited. Lists need not be sorted; a block may appear once in
// the two lists together. heads 1 shares one mask between every query head. docs/sparse_attention.md.
struct BlockMask {
  std::int64_t block_size_q = 128;                   // Qb
  std::int64_t block_size_k = 128;                   // Kb
  std::int64_t heads = 1;                            // 1 (every query head) or Hq
  const std::int32_t* kv_num_blocks = nullptr;       // (batch, heads, ⌈Nq/Qb⌉); null = no block mask
  const std::int32_t* kv_indices = nullptr;          // (batch, heads, ⌈Nq/Qb⌉, kv_width)
  std::int64_t kv_width = 0;
  const std::int32_t* full_kv_num_blocks = nullptr;  // optional, same shapes
  const std::int32_t* full_kv_indices = nullptr;
  std::int64_t full_kv_width = 0;
  bool active() const { return kv_num_blocks != nullptr; }
};

// Where a call sits in a larger problem (context parallelism, docs/distributed.md): it computes query rows
// [query_start, query_start + seqlen_q) of a problem of total_seqlen_q query rows against its keys
// [key_start, key_start + seqlen_k) of total_seqlen_k. The band, the ALiBi distances and the dropout
// decisions are that problem's: local row i has the diagonal (query_start + i) + total_seqlen_k −
// total_seqlen_q − key_start in local key coordinates, and local element (b, h, i, j) takes the dropout
// decision of element (b, h, query_start + i, key_start + j) of the whole problem. A mask tensor stays
// local (it describes this call's rows and keys). A total of −1 means this call's own length; the default
// is the whole problem. Forward and backward calls only: a varlen call's sequences are each their own problem.
struct BlockPosition {
  std::int64_t query_start = 0;
  std::int64_t key_start = 0;
  std::int64_t total_seqlen_q = -1;
  std::int64_t total_seqlen_k = -1;

  bool operator==(const BlockPosition&) const = default;
};

// What every attention call (forward, varlen, backward and decode) says about its heads: how many there are,
// their dimensions and element type, how their scores are formed (the inherited ScoreSettings), and how many
// threads compute them. Query head h reads K/V head h / (Hq / Hkv) (grouped-query attention).
struct HeadSettings : ScoreSettings {
  std::int64_t heads_q = 1;                // Hq
  std::int64_t heads_kv = 1;               // Hkv, divides Hq
  std::int64_t head_dim = 0;               // d, of Q and K
  std::optional<std::int64_t> head_dim_v;  // dv, of V and O; unset = same as d
  DType dtype = DType::kF32;               // of Q, K, V, O and of the gradients
  int num_threads = 0;                     // 0 = all cores

  // dv: head_dim_v if set, else head_dim.
  std::int64_t value_head_dim() const { return head_dim_v.value_or(head_dim); }
};

// Everything about a forward, varlen or backward call but where its tensors are and how long its
// sequences are: the HeadSettings, then dropout, the call's position in a larger problem and tiling.
struct AttentionSettings : HeadSettings {
  // Dropout on P (training; include/flashattn/backward.h): element (b, h, i, j) is dropped with probability
  // dropout_p, decided by Philox-4x32-10 keyed by dropout_seed at a counter set by dropout_offset; kept
  // elements are scaled by 1/(1 − p). LSE is that of the scores without dropout. 0 disables it.
  // docs/backward.md gives the counter of each element.
  float dropout_p = 0.0f;
  std::uint64_t dropout_seed = 0;
  std::uint64_t dropout_offset = 0;

  BlockPosition block_position;

  Tiling tiling;
};

}  // namespace flashattn

#endif  // FLASHATTN_TYPES_H_
