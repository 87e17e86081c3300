// Random attention problems that own their buffers, and the error measures the tests share.
#ifndef FLASHATTN_TESTS_TEST_PROBLEM_H_
#define FLASHATTN_TESTS_TEST_PROBLEM_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "flashattn/flashattn.h"

namespace flashattn::testing {

struct Shape {
  std::int64_t batch = 1, Nq = 1, Nk = 1, Hq = 1, Hkv = 1, d = 16, dv = 16;
  DType dtype = DType::kF32;
  bool head_major = false;  // (batch, head, seq, dim) instead of (batch, seq, head, dim)
  std::string ToString() const;
};

// Masks and modifiers (docs/algorithms.md §6) applied on top of a shape.
struct Modifiers {
  bool causal = false;
  std::int64_t window_left = -1, window_right = -1;
  float softcap = 0.0f;
  bool alibi = false;
  MaskKind mask = MaskKind::kNone;
  std::string ToString() const;
};

// The test matrices shared by every algorithm's tests (reference, fused forward, fused backward).
// The masks and modifiers: none, each alone, and all at once.
std::vector<Modifiers> ModifierMatrix();
// Every head dim × every (Nq, Nk), with one batch and one head and d = dv.
std::vector<Shape> ShapeGrid(const std::vector<std::int64_t>& head_dims,
                             const std::vector<std::pair<std::int64_t, std::int64_t>>& lengths);
// The forward matrix: odd and power-of-two head dims × square, ragged and one-row lengths, then long on both
// sides, GQA and MQA, d ≠ dv, batches and the head-major layout.
std::vector<Shape> ForwardShapeMatrix();
// The backward matrix: the same kinds, with shorter one-row lengths and the long square shape at a small d
// (the float64 oracle's gradients cost about 2 µs per (i, j) pair at d = 64: backward tests are slower).
std::vector<Shape> BackwardShapeMatrix();

// A problem with inputs drawn from N(0, 1) (times `input_scale`), outputs pre-filled with a NaN pattern
// so a test sees any element the algorithm forgot to write.
class Problem {
 public:
  Problem(const Shape& shape, const Modifiers& modifiers, std::uint64_t seed, float input_scale = 1.0f);
  Problem(const Problem&) = delete;
  Problem& operator=(const Problem&) = delete;

  const AttentionParams& params() const { return params_; }
  AttentionParams& params() { return params_; }
  const Shape& shape() const { return shape_; }

  // Output element (b, i, h, c) / LSE of (b, h, i) as float.
  float O(std::int64_t b, std::int64_t i, std::int64_t h, std::int64_t c) const;
  float Lse(std::int64_t b, std::int64_t h, std::int64_t i) const { return lse_[(b * shape_.Hq + h) * shape_.Nq + i]; }
  // Sets input element (b, i, h, c) of Q, K or V.
  void SetQ(std::int64_t b, std::int64_t i, std::int64_t h, std::int64_t c, float value);
  void SetK(std::int64_t b, std::int64_t j, std::int64_t h, std::int64_t c, float value);
  void SetV(std::int64_t b, std::int64_t j, std::int64_t h, std::int64_t c, float value);
  void ResetOutputs();

 private:
  Shape shape_;
  AttentionParams params_;
  std::vector<std::uint16_t> q_, k_, v_, o_;  // raw element storage (float32 uses two slots per element)
  std::vector<float> lse_, alibi_, mask_additive_;
  std::vector<std::uint8_t> mask_bool_;
};

// Describes in `params` the packed sequences of offsets cu_q and cu_k (batch + 1 each, starting at 0): batch,
// total_q, total_k, the offset pointers (the vectors must outlive params) and the longest sequences' lengths.
void SetPackedSequences(const std::vector<std::int32_t>& cu_q, const std::vector<std::int32_t>& cu_k,
                        VarlenParams* params);

// Errors of a computed output against the float64 oracle, over every (b, h, row):
//   o_error   = max |O − O_ref| / max |O_ref|   (normwise relative; absolute when O_ref is all zero)
//   lse_error = max |LSE − LSE_ref| / max(1, |LSE_ref|), with −inf required to match exactly
struct Errors {
  double o_error = 0.0;
  double lse_error = 0.0;
};
Errors CompareWithOracle(const Problem& problem, bool check_lse = true);

// Errors accumulated element by element: AddO for every output element, AddLse for every LSE entry (a NaN
// makes the error infinite).
class ErrorsAccumulator {
 public:
  void AddO(double actual, double expected);
  void AddLse(double actual, double expected);
  Errors Result() const { return {max_ref_ > 0 ? max_diff_ / max_ref_ : max_diff_, lse_error_}; }

 private:
  double max_diff_ = 0.0, max_ref_ = 0.0, lse_error_ = 0.0;
};

// O and the LSE of every (b, h, row) as raw values, and their bitwise comparison (memcmp: NaN-safe).
std::vector<float> OutputValues(const Problem& problem);
bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace flashattn::testing

#endif  // FLASHATTN_TESTS_TEST_PROBLEM_H_
