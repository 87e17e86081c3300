// One (batch b, query head h) attention problem as the reference algorithms see it: the caller's Q, K, V,
// O and LSE arrays in main memory (the paper's HBM), and the score S_ij with every mask and modifier applied
// (common/score.h). Every main-memory access of a reference algorithm goes through this class, so that the
// IO model (docs/io.md) can be counted from the algorithms themselves.
#ifndef FLASHATTN_REFERENCE_PROBLEM_H_
#define FLASHATTN_REFERENCE_PROBLEM_H_

#include <algorithm>
#include <cstdint>

#include "common/element.h"
#include "common/score.h"
#include "flashattn/flashattn.h"
#include "reference/io_count.h"

namespace flashattn::reference {

class HeadProblem {
 public:
  HeadProblem(const AttentionParams& params, std::int64_t b, std::int64_t h);

  const std::int64_t b, h;  // batch index and query head
  const std::int64_t Nq, Nk, d, dv;
  const float scale;  // s

  // Copies rows [row, row + n) of Q (or K, V) into `dst`, row-major n×d (n×dv for V), as T.
  template <typename T> void LoadQ(std::int64_t row, std::int64_t n, T* dst) const {
    LoadRows(q_, q_row_stride_, d, row, n, dst);
  }
  template <typename T> void LoadK(std::int64_t row, std::int64_t n, T* dst) const {
    LoadRows(k_, k_row_stride_, d, row, n, dst);
  }
  template <typename T> void LoadV(std::int64_t row, std::int64_t n, T* dst) const {
    LoadRows(v_, v_row_stride_, dv, row, n, dst);
  }
  // O rows are read back only by FlashAttention-1, whose O lives in main memory between K/V blocks.
  void LoadO(std::int64_t row, std::int64_t n, float* dst) const;
  // Writes rows [row, row + n) of O from n×dv values, rounded to the output type.
  template <typename T> void StoreO(std::int64_t row, std::int64_t n, const T* src) const;
  // Writes LSE for rows [row, row + n) if the caller asked for it.
  void StoreLse(std::int64_t row, std::int64_t n, const float* src) const;
  bool WantsLse() const { return lse_ != nullptr; }

  // Whether key j is in query row i's band, whether row i sees it (band and boolean mask), and S_ij from
  // q_i·k_j (−∞ where it does not): ScoreModifiers' one description of them.
  bool Visible(std::int64_t i, std::int64_t j) const { return mods_.Visible(i, j); }
  bool Sees(std::int64_t i, std::int64_t j) const { return mods_.Sees(i, j); }
  template <typename T> T Score(std::int64_t i, std::int64_t j, T q_dot_k) const { return mods_.Score(i, j, q_dot_k); }
  // The head's attention sink s_h (−∞: none), and the softmax state (m, l) every row starts from.
  float Sink() const { return mods_.sink; }
  RowStart Start() const { return SoftmaxRowStart(mods_.sink); }

  // Main-memory traffic of this problem so far (for the IO model).
  const IoCount& io() const { return io_; }
  // Counts n elements of `element_bytes` each moved from (CountRead) or to (CountWrite) main memory; only
  // the loads and stores above and MainMemoryArray call these.
  void CountRead(std::int64_t n, std::int64_t element_bytes) const {
    io_.read += n, io_.read_bytes += n * element_bytes;
  }
  void CountWrite(std::int64_t n, std::int64_t element_bytes) const {
    io_.written += n, io_.written_bytes += n * element_bytes;
  }
  std::int64_t ElementBytes() const { return static_cast<std::int64_t>(size_of(dtype_)); }

 private:
  template <typename T>
  void LoadRows(const void* base, std::int64_t row_stride, std::int64_t width, std::int64_t row,
                std::int64_t n, T* dst) const {
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t c = 0; c < width; ++c)
        dst[r * width + c] = static_cast<T>(LoadAsFloat(base, dtype_, (row + r) * row_stride + c));
    CountRead(n * width, ElementBytes());
  }

  DType dtype_;
  // Base pointers already offset to (b, h) or (b, h / (Hq/Hkv)); rows step by the sequence stride.
  const void* q_;
  const void* k_;
  const void* v_;
  void* o_;
  float* lse_;
  std::int64_t q_row_stride_, k_row_stride_, v_row_stride_, o_row_stride_;
  ScoreModifiers mods_;
  mutable IoCount io_;
};

template <typename T>
void HeadProblem::StoreO(std::int64_t row, std::int64_t n, const T* src) const {
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t c = 0; c < dv; ++c)
      StoreFromFloat(o_, dtype_, (row + r) * o_row_stride_ + c, static_cast<float>(src[r * dv + c]));
  CountWrite(n * dv, ElementBytes());
}

// An array that an algorithm keeps in main memory besides the caller's tensors (S and P of standard, l and
// m of flash1). Its elements reach fast memory only through Load and Store, which count them on the
// problem's io(), like the loads and stores of Q, K, V, O and LSE.
class MainMemoryArray {
 public:
  MainMemoryArray(const HeadProblem& problem, float* data, std::int64_t element_bytes)
      : problem_(problem), data_(data), element_bytes_(element_bytes) {}

  // Copies elements [index, index + n) to fast memory `dst`.
  void Load(std::int64_t index, std::int64_t n, float* dst) const {
    std::copy_n(data_ + index, n, dst);
    problem_.CountRead(n, element_bytes_);
  }
  // Writes elements [index, index + n) from fast memory `src`.
  void Store(std::int64_t index, std::int64_t n, const float* src) const {
    std::copy_n(src, n, data_ + index);
    problem_.CountWrite(n, element_bytes_);
  }
  // Sets elements [0, n) to `value` (the initialization of Algorithm 1 writes them to main memory).
  void Fill(std::int64_t n, float value) const {
    std::fill_n(data_, n, value);
    problem_.CountWrite(n, element_bytes_);
  }

 private:
  const HeadProblem& problem_;
  float* data_;
  std::int64_t element_bytes_;
};

// Runs `solve(problem)` for every (batch, query head), in parallel over heads with the params' thread
// count, and adds each head's traffic to `*io` if `io` is given. `solve` must not throw: allocate scratch
// before calling this.
template <typename Solve>
void ForEachHead(const AttentionParams& params, Solve&& solve, IoCount* io = nullptr);

int ResolveThreads(int requested);

// FlashAttention-2's step of query row i over a block of `cols` keys in fast memory (the reference flash2 and
// tools/io_model's counted fused kernel): S_r[c] = S_{i, j0 + c} from q_r · k_c (q_r: d floats, K_j: cols rows
// of d floats), m_new = max(m, rowmax S_r) keeping NaN, then S_r[c] ← P̃ = e^{S_r[c] − m_new} in place.
struct OnlineRowStep {
  float m_new;
  float row_sum;  // Σ_c P̃_c
};
OnlineRowStep ScoreRowOnline(const HeadProblem& problem, std::int64_t i, std::int64_t j0, std::int64_t cols,
                             const float* q_r, const float* K_j, float m, float* S_r);

}  // namespace flashattn::reference

#include "reference/problem-inl.h"

#endif  // FLASHATTN_REFERENCE_PROBLEM_H_
