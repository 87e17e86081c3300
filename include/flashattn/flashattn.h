// flashattn: exact, IO-aware attention for CPUs.
//
//   O = softmax(scale · Q Kᵀ + bias, masked) V        per (batch, query head)
//
// One parameter struct describes a batch of attention problems laid out in the caller's memory; one call
// computes all of them. The header holds no SIMD types: kernels are selected at run time inside the library.
#ifndef FLASHATTN_FLASHATTN_H_
#define FLASHATTN_FLASHATTN_H_

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace flashattn {

// Thrown for every invalid call. The message names the argument and the offending values. When it is
// thrown, nothing the caller owns has been written.
class Error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Element type of Q, K, V and O. Accumulation is always float32 (float64 in the oracle).
enum class DType : std::uint8_t { kF32, kF16, kBF16 };

std::string_view ToString(DType dtype);
std::size_t SizeOf(DType dtype);

// Which implementation computes the forward pass. The reference algorithms are the readable ones of the
// seeds' derivation (src/reference/); they are the oracle that the fast kernels are tested against.
enum class Algorithm : std::uint8_t {
  kStandard,  // materializes S and P (Nq×Nk) per head
  kFlash1,    // FlashAttention-1: K/V blocks outer, Q blocks inner, O/l/m in main memory
  kFlash2,    // FlashAttention-2: Q blocks outer, unnormalized accumulator, one division, LSE
  kFused,     // the fast kernel: flash2's loop order in SIMD registers and cache, threaded (the default)
  kOracle,    // standard attention in float64 (inputs converted exactly), rounded once to the output type
};

// Every algorithm, in the order the seeds introduce them (the demo and the benchmarks iterate over it).
inline constexpr Algorithm kAllAlgorithms[] = {Algorithm::kStandard, Algorithm::kFlash1, Algorithm::kFlash2,
                                               Algorithm::kFused, Algorithm::kOracle};

std::string_view ToString(Algorithm algorithm);
// Parses "standard", "flash1", "flash2", "fused", "oracle"; throws Error naming `argument` otherwise.
Algorithm ParseAlgorithm(std::string_view name, std::string_view argument = "algorithm");

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

// Block sizes of the tiled algorithms. Zero means "choose": the reference algorithms use the seeds' rule
// Bc = ⌈M / 4d⌉, Br = min(Bc, d) with M = fast_memory_bytes (default kDefaultFastMemoryBytes); the fused
// kernel derives its own from the detected cache sizes.
struct Tiling {
  std::int64_t fast_memory_bytes = 0;  // M, in bytes; the seeds count it in float32 elements of 4 bytes
  std::int64_t block_rows = 0;         // Br: query rows per Q block
  std::int64_t block_cols = 0;         // Bc: key rows per K/V block
};
inline constexpr std::int64_t kDefaultFastMemoryBytes = 256 * 1024;

inline constexpr std::int64_t kMaxHeadDim = 512;

// A batch of attention problems. Q is (batch, Nq, Hq, d), K is (batch, Nk, Hkv, d), V is (batch, Nk, Hkv,
// dv) and O is (batch, Nq, Hq, dv), each addressed through its own strides in elements of `dtype`.
// Query head h reads K/V head h / (Hq / Hkv) (grouped-query attention).
struct AttentionParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  // Optional log-sum-exp of each row's scores, natural log, float32, contiguous (batch, Hq, Nq).
  // −inf for a row that sees no key.
  float* lse = nullptr;

  Strides q_strides, k_strides, v_strides, o_strides;

  std::int64_t batch = 1;
  std::int64_t seqlen_q = 0;   // Nq
  std::int64_t seqlen_k = 0;   // Nk
  std::int64_t heads_q = 1;    // Hq
  std::int64_t heads_kv = 1;   // Hkv, divides Hq
  std::int64_t head_dim = 0;   // d
  std::optional<std::int64_t> head_dim_v;  // dv; unset = same as d
  DType dtype = DType::kF32;

  std::optional<float> scale;  // s; default 1/√d
  // Causal mask aligned bottom-right: query row i sees key j iff j ≤ i + Nk − Nq.
  bool causal = false;
  // Sliding window (left, right), −1 = unbounded: i + Nk − Nq − left ≤ j ≤ i + Nk − Nq + right.
  std::int64_t window_left = -1;
  std::int64_t window_right = -1;
  // softcap c > 0: S ← c·tanh(S / c), after scaling and before bias and masking. 0 disables it.
  float softcap = 0.0f;
  // ALiBi: S += −slope·|i + Nk − Nq − j|. float32 slopes of shape (Hq) when alibi_batch_stride is 0,
  // or (batch, Hq) with row stride alibi_batch_stride.
  const float* alibi_slopes = nullptr;
  std::int64_t alibi_batch_stride = 0;

  MaskTensor mask;

  // Dropout on P (training; include/flashattn/backward.h): element (b, h, i, j) is dropped with probability
  // dropout_p, decided by Philox-4x32-10 keyed by dropout_seed at a counter set by dropout_offset; kept
  // elements are scaled by 1/(1 − p). LSE is that of the scores without dropout. 0 disables it.
  float dropout_p = 0.0f;
  std::uint64_t dropout_seed = 0;
  std::uint64_t dropout_offset = 0;

  Tiling tiling;
  int num_threads = 0;  // 0 = all cores

  // Fills the strides for contiguous tensors in flash-attn's (batch, seq, head, dim) layout.
  void SetContiguousStrides();
  // Fills the strides for contiguous tensors in PyTorch's (batch, head, seq, dim) layout.
  void SetHeadMajorStrides();
  std::int64_t HeadDimV() const { return head_dim_v.value_or(head_dim); }
};

// Checks `params` and throws Error describing the first problem found. Every entry point calls it before
// touching any output; callers may use it to check a call without running it.
void Validate(const AttentionParams& params);

// Computes O (and LSE if requested) for every problem in `params`.
void forward(const AttentionParams& params, Algorithm algorithm = Algorithm::kFused);

}  // namespace flashattn

#endif  // FLASHATTN_FLASHATTN_H_
