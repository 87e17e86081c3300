// The validation matrix of backward() (docs/robustness.md), for every backward algorithm: each row throws
// flashattn::Error naming the argument and the offending values, and leaves the gradients, the forward
// call's tensors (O and LSE included) and every other byte of the arena unchanged.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "flashattn/backward.h"
#include "validate.h"
#include "validation_matrix.h"

namespace flashattn::testing {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Every optional input in use: LSE, per-(batch, head) ALiBi, an additive mask, dropout.
struct BackwardFixture {
  static constexpr std::int64_t B = 2, Nq = 3, Nk = 5, Hq = 4, Hkv = 2, d = 8, dv = 6;
  static constexpr std::int64_t kQ = B * Nq * Hq * d, kK = B * Nk * Hkv * d, kV = B * Nk * Hkv * dv,
                                kO = B * Nq * Hq * dv, kLse = B * Hq * Nq, kMask = B * Hq * Nq * Nk;
  Arena arena{32 * 1024};
  BackwardParams params;
  float *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *lse = nullptr, *alibi = nullptr,
        *mask = nullptr, *d_o = nullptr, *dq = nullptr, *dk = nullptr, *dv_ = nullptr;
  std::uint8_t* keep = nullptr;  // materialize_dropout_mask's output

  void Make() {
    // Gradients first: a row pointing one at an input then overlaps that input before any other gradient.
    dq = arena.Take<float>(kQ), dk = arena.Take<float>(kK), dv_ = arena.Take<float>(kV);
    q = arena.Take<float>(kQ), k = arena.Take<float>(kK), v = arena.Take<float>(kV);
    alibi = arena.Take<float>(B * Hq), mask = arena.Take<float>(kMask);
    o = arena.Take<float>(kO), lse = arena.Take<float>(kLse), d_o = arena.Take<float>(kO);
    keep = arena.Take<std::uint8_t>(kMask);
    Arena::FillPattern(keep, kMask);
    Arena::FillNormal(q, kQ, 1), Arena::FillNormal(k, kK, 2), Arena::FillNormal(v, kV, 3);
    Arena::FillNormal(d_o, kO, 4);
    for (std::int64_t n = 0; n < B * Hq; ++n) alibi[n] = 0.2f / static_cast<float>(n + 1);
    for (std::int64_t n = 0; n < kMask; ++n) mask[n] = n % 7 == 3 ? -kInf : 0.0f;
    Arena::FillPattern(dq, sizeof(float) * kQ);
    Arena::FillPattern(dk, sizeof(float) * kK);
    Arena::FillPattern(dv_, sizeof(float) * kV);
    AttentionParams& a = params.attention;
    a.q = q, a.k = k, a.v = v, a.o = o, a.lse = lse;
    a.batch = B, a.seqlen_q = Nq, a.seqlen_k = Nk, a.heads_q = Hq, a.heads_kv = Hkv;
    a.head_dim = d, a.head_dim_v = dv;
    a.causal = true;
    a.alibi_slopes = alibi, a.alibi_batch_stride = Hq;
    a.mask = {MaskKind::kAdditive, mask, Hq * Nq * Nk, Nq * Nk, Nk, 1};
    a.dropout_p = 0.25f, a.dropout_seed = 7;
    a.num_threads = 1;  // the table makes a fixture per row and algorithm: no thread start-up each time
    params.d_o = d_o, params.dq = dq, params.dk = dk, params.dv = dv_;
    params.set_contiguous_strides();
    forward(a);  // O and LSE as backward expects them
  }
};

using Row = Rejection<BackwardFixture>;
using F = BackwardFixture;

std::vector<Row> Rows() {
  return {
      // The forward pass's LSE.
      {"lse_missing",
       [](F& f) { f.params.attention.lse = nullptr; },
       {"attention.lse is required by backward"}},
      {"lse_nan",
       [](F& f) { f.lse[(1 * F::Hq + 2) * F::Nq + 0] = kNaN; },
       {"attention.lse must be finite or -inf, got nan at (batch, head, row) = (1, 2, 0)"}},
      {"lse_plus_inf",
       [](F& f) { f.lse[5] = kInf; },
       {"attention.lse must be finite or -inf, got inf at (batch, head, row) = (0, 1, 2)"}},
      {"lse_index_overflows",
       [](F& f) {
         AttentionParams& a = f.params.attention;
         a.heads_q = a.heads_kv = a.seqlen_q = kTwoTo32;
         a.alibi_slopes = nullptr, a.alibi_batch_stride = 0, a.mask.kind = MaskKind::kNone,
         a.dropout_p = 0.0f;
       },
       {"attention.lse is too large to index in 64 bits (heads_q=4294967296 times seqlen_q=4294967296)"}},
      // Null pointers.
      {"null_d_o", [](F& f) { f.params.d_o = nullptr; }, {"d_o is a null pointer but holds 144 elements"}},
      {"null_dq", [](F& f) { f.params.dq = nullptr; }, {"dq is a null pointer but holds 192 elements"}},
      {"null_dk", [](F& f) { f.params.dk = nullptr; }, {"dk is a null pointer but holds 160 elements"}},
      {"null_dv", [](F& f) { f.params.dv = nullptr; }, {"dv is a null pointer but holds 120 elements"}},
      {"null_q",
       [](F& f) { f.params.attention.q = nullptr; },
       {"attention.q is a null pointer but holds 192"}},
      {"null_o",
       [](F& f) { f.params.attention.o = nullptr; },
       {"attention.o is a null pointer but holds 144"}},
      {"null_mask_data",
       [](F& f) { f.params.attention.mask.data = nullptr; },
       {"attention.mask.data is a null pointer but mask.kind is set"}},
      // Gradients overlapping an input, each other or themselves.
      {"dq_is_q", [](F& f) { f.params.dq = f.q; }, {"dq overlaps attention.q (dq bytes ["}},
      {"dq_inside_o", [](F& f) { f.params.dq = f.o + 1; }, {"dq overlaps attention.o"}},
      {"dk_on_lse", [](F& f) { f.params.dk = f.lse + 2; }, {"dk overlaps attention.lse"}},
      {"dq_on_alibi", [](F& f) { f.params.dq = f.alibi; }, {"dq overlaps attention.alibi_slopes"}},
      {"dv_on_mask", [](F& f) { f.params.dv = f.mask + 10; }, {"dv overlaps attention.mask"}},
      {"dv_is_d_o", [](F& f) { f.params.dv = f.d_o; }, {"dv overlaps d_o"}},
      {"dk_is_dv", [](F& f) { f.params.dv = f.dk; }, {"dk overlaps dv"}},
      {"dq_overlaps_itself", [](F& f) { f.params.dq_strides.seq = 1; }, {"dq overlaps itself"}},
      {"dk_heads_collide",
       [](F& f) { f.params.dk_strides.head = 0; },
       {"dk overlaps itself: dimension 'head' has stride 0"}},
      // Strides and sizes.
      {"negative_dk_head_stride",
       [](F& f) { f.params.dk_strides.head = -1; },
       {"dk stride of dimension 'head' must be >= 0, got -1"}},
      {"negative_d_o_seq_stride",
       [](F& f) { f.params.do_strides.seq = -24; },
       {"d_o stride of dimension 'seq' must be >= 0, got -24"}},
      {"d_o_offset_overflows",
       [](F& f) { f.params.do_strides.seq = std::int64_t{1} << 62; },
       {"d_o is too large to index in 64 bits (dimension 'seq' of size 3 with stride 4611686018427387904)"}},
      {"negative_batch", [](F& f) { f.params.attention.batch = -1; }, {"batch must be >= 0, got -1"}},
      {"heads_not_multiple",
       [](F& f) { f.params.attention.heads_kv = 3; },
       {"heads_q must be a multiple of heads_kv, got heads_q=4 heads_kv=3"}},
      {"head_dim_zero",
       [](F& f) { f.params.attention.head_dim = 0; },
       {"head_dim must be in [1, 576], got 0"}},
      {"head_dim_v_above_max",
       [](F& f) { f.params.attention.head_dim_v = 600; },
       {"head_dim_v must be in [1, 576], got 600"}},
      // Modifiers and dropout.
      {"window_left_below_minus_one",
       [](F& f) { f.params.attention.window_left = -2; },
       {"window_left must be >= -1, got -2"}},
      {"softcap_negative",
       [](F& f) { f.params.attention.softcap = -0.5f; },
       {"softcap must be finite", "got -0.5"}},
      {"scale_nan", [](F& f) { f.params.attention.scale = kNaN; }, {"scale must be finite, got nan"}},
      {"alibi_batch_stride_below_heads",
       [](F& f) { f.params.attention.alibi_batch_stride = 3; },
       {"alibi_batch_stride must be 0 (slopes per head) or >= heads_q=4, got 3"}},
      {"unknown_mask_kind",
       [](F& f) { f.params.attention.mask.kind = static_cast<MaskKind>(9); },
       {"attention.mask.kind has an unknown value 9"}},
      {"dropout_one",
       [](F& f) { f.params.attention.dropout_p = 1.0f; },
       {"dropout_p must be in [0, 1), got 1"}},
      {"dropout_negative",
       [](F& f) { f.params.attention.dropout_p = -0.1f; },
       {"dropout_p must be in [0, 1), got -0.1"}},
      {"dropout_nan",
       [](F& f) { f.params.attention.dropout_p = kNaN; },
       {"dropout_p must be in [0, 1), got nan"}},
      {"dropout_counters_overflow",
       [](F& f) { f.params.attention.seqlen_q = f.params.attention.seqlen_k = std::int64_t{1} << 40; },
       {"dropout needs batch·heads_q·seqlen_q·⌈seqlen_k/4⌉ generator counters, more than 2^63",
        "seqlen_q=1099511627776"}},
      {"negative_threads",
       [](F& f) { f.params.attention.num_threads = -1; },
       {"num_threads must be in [0, 1024], got -1"}},
  };
}

TEST(BackwardValidationMatrix, EveryRowIsRejectedWithoutWriting) {
  for (BackwardAlgorithm algorithm :
       {BackwardAlgorithm::kStandard, BackwardAlgorithm::kFused, BackwardAlgorithm::kOracle}) {
    SCOPED_TRACE(static_cast<int>(algorithm));
    CheckRejections<F>(
        Rows(), [](F& f) { f.Make(); }, [algorithm](F& f) { backward(f.params, algorithm); },
        [](F& f) { validate(f.params); });
  }
}

// materialize_dropout_mask writes (batch, Hq, Nq, Nk) bytes: the forward checks, then its own output's.
std::vector<Row> DropoutMaskRows() {
  return {
      {"null_keep", [](F& f) { f.keep = nullptr; }, {"keep is a null pointer but holds 120 elements"}},
      {"keep_on_q", [](F& f) { f.keep = reinterpret_cast<std::uint8_t*>(f.q) + 3; }, {"keep overlaps q"}},
      {"keep_on_lse", [](F& f) { f.keep = reinterpret_cast<std::uint8_t*>(f.lse); }, {"keep overlaps lse"}},
      {"keep_on_mask",
       [](F& f) { f.keep = reinterpret_cast<std::uint8_t*>(f.mask) + 1; },
       {"keep overlaps mask"}},
      {"keep_index_overflows",
       [](F& f) {
         AttentionParams& a = f.params.attention;
         a.seqlen_k = std::int64_t{1} << 62;  // keys broadcast from one stored row
         a.k_strides = a.v_strides = {0, 0, 0};
         a.mask.kind = MaskKind::kNone, a.dropout_p = 0.0f;
       },
       {"keep is too large to index in 64 bits (heads_q=4 seqlen_q=3 seqlen_k=4611686018427387904)"}},
      {"dropout_p_above_one",
       [](F& f) { f.params.attention.dropout_p = 1.5f; },
       {"dropout_p must be in [0, 1), got 1.5"}},
  };
}

TEST(BackwardValidationMatrix, MaterializeDropoutMaskRowsAreRejectedWithoutWriting) {
  CheckRejections<F>(
      DropoutMaskRows(), [](F& f) { f.Make(); },
      [](F& f) { materialize_dropout_mask(f.params.attention, f.keep); },
      [](F& f) { ValidateDropoutMask(f.params.attention, f.keep); });
}

TEST(BackwardValidationMatrix, UnknownAlgorithmIsRejectedWithoutWriting) {
  CheckRejections<F>(
      {{"unknown_algorithm", [](F&) {}, {"algorithm has an unknown value 9"}}}, [](F& f) { f.Make(); },
      [](F& f) { backward(f.params, static_cast<BackwardAlgorithm>(9)); },
      [](F& f) { backward(f.params, static_cast<BackwardAlgorithm>(9)); });
}

TEST(BackwardValidationMatrix, FixtureCallIsAcceptedAndWritesEveryGradient) {
  F f;
  f.Make();
  ASSERT_NO_THROW(backward(f.params));
  for (auto [gradient, count] : {std::pair{f.dq, F::kQ}, {f.dk, F::kK}, {f.dv_, F::kV}}) {
    for (std::int64_t n = 0; n < count; ++n) ASSERT_TRUE(std::isfinite(gradient[n])) << n;
  }
}

}  // namespace
}  // namespace flashattn::testing
