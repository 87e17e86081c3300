// The validation matrix of merge_attention_states() and forward_varlen() (docs/robustness.md): each row throws
// flashattn::Error naming the argument and the offending values and leaves every byte of the arena unchanged.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "flashattn/merge.h"
#include "flashattn/varlen.h"
#include "validation_matrix.h"

namespace flashattn::testing {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// ---- merge_attention_states: 3 partials of (batch 2, seqlen 3, heads 2, dv 8)
// --------------------------------

struct MergeFixture {
  static constexpr std::int64_t P = 3, B = 2, S = 3, H = 2, dv = 8, kRows = B * S * H;
  Arena arena{16 * 1024};
  MergeParams params;
  float *o_partials = nullptr, *lse_partials = nullptr, *o = nullptr, *lse = nullptr;

  void Make() {
    o_partials = arena.Take<float>(P * kRows * dv);
    lse_partials = arena.Take<float>(P * kRows);
    o = arena.Take<float>(kRows * dv);
    lse = arena.Take<float>(kRows);
    Arena::FillNormal(o_partials, P * kRows * dv, 1);
    Arena::FillNormal(lse_partials, P * kRows, 2);
    lse_partials[5] = -kInf;  // a partial that saw no key is valid
    Arena::FillPattern(o, sizeof(float) * kRows * dv);
    Arena::FillPattern(lse, sizeof(float) * kRows);
    MergeParams& m = params;
    m.o_partials = o_partials, m.lse_partials = lse_partials, m.o = o, m.lse = lse;
    m.num_partials = P, m.batch = B, m.seqlen = S, m.heads = H, m.head_dim_v = dv;
    m.set_contiguous_strides();
  }
};

std::vector<Rejection<MergeFixture>> MergeRows() {
  using M = MergeFixture;
  return {
      {"negative_partials", [](M& f) { f.params.num_partials = -1; }, {"num_partials must be >= 0, got -1"}},
      {"negative_batch", [](M& f) { f.params.batch = -1; }, {"batch must be >= 0, got -1"}},
      {"negative_seqlen", [](M& f) { f.params.seqlen = -4; }, {"seqlen must be >= 0, got -4"}},
      {"zero_heads", [](M& f) { f.params.heads = 0; }, {"heads must be >= 1, got 0"}},
      {"head_dim_v_zero", [](M& f) { f.params.head_dim_v = 0; }, {"head_dim_v must be in [1, 576], got 0"}},
      {"head_dim_v_above_max",
       [](M& f) { f.params.head_dim_v = 577; },
       {"head_dim_v must be in [1, 576], got 577"}},
      {"unknown_dtype",
       [](M& f) { f.params.dtype = static_cast<DType>(5); },
       {"dtype has an unknown value 5"}},
      {"null_o_partials",
       [](M& f) { f.params.o_partials = nullptr; },
       {"o_partials is a null pointer but holds 288 elements"}},
      {"null_lse_partials",
       [](M& f) { f.params.lse_partials = nullptr; },
       {"lse_partials is a null pointer but holds 36 elements"}},
      {"null_o", [](M& f) { f.params.o = nullptr; }, {"o is a null pointer but holds 96 elements"}},
      {"negative_o_stride",
       [](M& f) { f.params.o_strides.seq = -16; },
       {"o stride of dimension 'seq' must be >= 0, got -16"}},
      {"o_overlaps_itself",
       [](M& f) { f.params.o_strides.head = 4; },
       {"o overlaps itself: dimension 'head' has stride 4 but the smaller dimensions span 8 elements"}},
      {"o_is_o_partials", [](M& f) { f.params.o = f.o_partials; }, {"o overlaps o_partials"}},
      {"lse_inside_lse_partials",
       [](M& f) { f.params.lse = f.lse_partials + 1; },
       {"lse overlaps lse_partials"}},
      {"lse_inside_o", [](M& f) { f.params.lse = f.o + 90; }, {"o overlaps lse"}},
      {"lse_partial_nan",
       [](M& f) { f.lse_partials[7] = kNaN; },
       {"lse_partials must be finite or -inf, got nan at partial 0 row 7"}},
      {"lse_partial_plus_inf",
       [](M& f) { f.lse_partials[20] = kInf; },
       {"lse_partials must be finite or -inf, got inf at partial 1 row 8"}},
      {"row_count_overflows",
       [](M& f) {
         f.params.batch = f.params.seqlen = kTwoTo32;
         f.params.o_strides = {0, 0, 0};
       },
       {"o_partials is too large to index in 64 bits (batch=4294967296 seqlen=4294967296 heads=2"}},
      // 2^61 rows fit, 2^61 rows of 8 elements do not.
      {"partial_size_overflows",
       [](M& f) {
         f.params.batch = std::int64_t{1} << 31, f.params.seqlen = std::int64_t{1} << 29;
         f.params.o_strides = {0, 0, 0};
       },
       {"o_partials is too large to index in 64 bits", "head_dim_v=8"}},
  };
}

TEST(MergeValidationMatrix, EveryRowIsRejectedWithoutWriting) {
  CheckRejections<MergeFixture>(
      MergeRows(), [](MergeFixture& f) { f.Make(); },
      [](MergeFixture& f) { merge_attention_states(f.params); }, [](MergeFixture& f) { validate(f.params); });
}

TEST(MergeValidationMatrix, FixtureCallIsAccepted) {
  MergeFixture f;
  f.Make();
  EXPECT_NO_THROW(merge_attention_states(f.params));
}

// ---- forward_varlen: sequences of 3, 2, 4 queries and 2, 2, 2 keys, per-sequence ALiBi, LSE
// ------------------

struct VarlenFixture {
  static constexpr std::int64_t B = 3, Tq = 9, Tk = 6, Hq = 4, Hkv = 2, d = 8, dv = 6;
  Arena arena{16 * 1024};
  VarlenParams params;
  float *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *lse = nullptr, *alibi = nullptr;
  std::int32_t *cu_q = nullptr, *cu_k = nullptr;

  void Make() {
    q = arena.Take<float>(Tq * Hq * d);
    k = arena.Take<float>(Tk * Hkv * d);
    v = arena.Take<float>(Tk * Hkv * dv);
    alibi = arena.Take<float>(B * Hq);
    o = arena.Take<float>(Tq * Hq * dv);
    lse = arena.Take<float>(Hq * Tq);
    cu_q = arena.Take<std::int32_t>(B + 1);
    cu_k = arena.Take<std::int32_t>(B + 1);
    Arena::FillNormal(q, Tq * Hq * d, 1);
    Arena::FillNormal(k, Tk * Hkv * d, 2);
    Arena::FillNormal(v, Tk * Hkv * dv, 3);
    for (std::int64_t n = 0; n < B * Hq; ++n) alibi[n] = 0.1f * static_cast<float>(n + 1);
    Arena::FillPattern(o, sizeof(float) * Tq * Hq * dv);
    Arena::FillPattern(lse, sizeof(float) * Hq * Tq);
    const std::int32_t starts_q[] = {0, 3, 5, 9}, starts_k[] = {0, 2, 4, 6};
    std::memcpy(cu_q, starts_q, sizeof(starts_q));
    std::memcpy(cu_k, starts_k, sizeof(starts_k));
    VarlenParams& p = params;
    p.heads_q = Hq, p.heads_kv = Hkv, p.head_dim = d, p.head_dim_v = dv;
    p.causal = true;
    p.alibi_slopes = alibi, p.alibi_batch_stride = Hq;
    p.q = q, p.k = k, p.v = v, p.o = o, p.lse = lse;
    p.total_q = Tq, p.total_k = Tk, p.batch = B;
    p.cu_seqlens_q = cu_q, p.cu_seqlens_k = cu_k;
    p.max_seqlen_q = 4, p.max_seqlen_k = 2;
  }
};

std::vector<Rejection<VarlenFixture>> VarlenRows() {
  using V = VarlenFixture;
  return {
      // cu_seqlens.
      {"cu_q_decreasing",
       [](V& f) { f.cu_q[1] = 6; },
       {"cu_seqlens_q must be non-decreasing, got cu_seqlens_q[1]=6 > cu_seqlens_q[2]=5"}},
      {"cu_k_not_ending_at_total",
       [](V& f) { f.cu_k[3] = 5; },
       {"cu_seqlens_k must end at the packed length 6, got cu_seqlens_k[3]=5"}},
      {"cu_k_past_total",
       [](V& f) {
         f.cu_k[3] = 7;
         f.params.max_seqlen_k = 3;
       },
       {"cu_seqlens_k must end at the packed length 6, got cu_seqlens_k[3]=7"}},
      {"cu_k_sequence_beyond_max_seqlen",
       [](V& f) { f.cu_k[3] = 7; },
       {"sequence 2 has length 3 in cu_seqlens_k, beyond its max_seqlen of 2"}},
      {"cu_q_not_starting_at_zero", [](V& f) { f.cu_q[0] = 1; }, {"cu_seqlens_q[0] must be 0, got 1"}},
      {"sequence_beyond_max_seqlen",
       [](V& f) { f.params.max_seqlen_q = 3; },
       {"sequence 2 has length 4 in cu_seqlens_q, beyond its max_seqlen of 3"}},
      {"null_cu_q",
       [](V& f) { f.params.cu_seqlens_q = nullptr; },
       {"cu_seqlens_q is a null pointer but holds 4 elements"}},
      {"o_on_cu_seqlens_q", [](V& f) { f.params.o = f.cu_q; }, {"o overlaps cu_seqlens_q"}},
      {"lse_on_cu_seqlens_k",
       [](V& f) { f.params.lse = reinterpret_cast<float*>(f.cu_k); },
       {"lse overlaps cu_seqlens_k"}},
      // Sizes.
      {"negative_batch",
       [](V& f) { f.params.batch = -1; },
       {"batch must be in [0, 9223372036854775806], got -1"}},
      {"batch_int64_max",
       [](V& f) { f.params.batch = INT64_MAX; },
       {"batch must be in [0, 9223372036854775806], got 9223372036854775807"}},
      {"negative_total_q", [](V& f) { f.params.total_q = -1; }, {"total_q must be >= 0, got -1"}},
      {"negative_total_k", [](V& f) { f.params.total_k = -2; }, {"total_k must be >= 0, got -2"}},
      {"negative_max_seqlen_k",
       [](V& f) { f.params.max_seqlen_k = -1; },
       {"max_seqlen_k must be >= 0, got -1"}},
      {"heads_q_not_multiple", [](V& f) { f.params.heads_kv = 3; }, {"heads_q=4 heads_kv=3"}},
      {"head_dim_zero", [](V& f) { f.params.head_dim = 0; }, {"head_dim must be in [1, 576], got 0"}},
      {"head_dim_v_above_max",
       [](V& f) { f.params.head_dim_v = 577; },
       {"head_dim_v must be in [1, 576], got 577"}},
      {"packed_row_overflows",
       [](V& f) { f.params.heads_q = f.params.heads_kv = f.params.alibi_batch_stride = std::int64_t{1} << 60; },
       {"a packed row of heads_q=1152921504606846976 heads of head_dim=8 is too large to index in 64 bits"}},
      // Bad modifiers.
      {"dropout_p_one", [](V& f) { f.params.dropout_p = 1.0f; }, {"dropout_p must be in [0, 1), got 1"}},
      {"window_left_below_minus_one",
       [](V& f) { f.params.window_left = -2; },
       {"window_left must be >= -1, got -2"}},
      {"softcap_nan", [](V& f) { f.params.softcap = kNaN; }, {"softcap must be finite", "got nan"}},
      {"scale_infinite", [](V& f) { f.params.scale = kInf; }, {"scale must be finite, got inf"}},
      {"alibi_batch_stride_below_heads",
       [](V& f) { f.params.alibi_batch_stride = 2; },
       {"alibi_batch_stride must be 0 (slopes per head) or >= heads_q=4, got 2"}},
      {"alibi_batch_stride_negative",
       [](V& f) { f.params.alibi_batch_stride = -4; },
       {"alibi_batch_stride must be >= 0, got -4"}},
      {"negative_threads",
       [](V& f) { f.params.num_threads = -1; },
       {"num_threads must be in [0, 1024], got -1"}},
      // Packed tensors.
      {"null_q", [](V& f) { f.params.q = nullptr; }, {"q is a null pointer but holds 288 elements"}},
      {"null_v", [](V& f) { f.params.v = nullptr; }, {"v is a null pointer but holds 72 elements"}},
      {"null_o", [](V& f) { f.params.o = nullptr; }, {"o is a null pointer but holds 216 elements"}},
      {"negative_q_row_stride",
       [](V& f) { f.params.q_row_stride = -1; },
       {"q stride of dimension 'seq' must be >= 0, got -1"}},
      {"o_heads_overlap",
       [](V& f) { f.params.o_head_stride = 3; },
       {"o overlaps itself: dimension 'head' has stride 3 but the smaller dimensions span 6 elements"}},
      {"o_is_q", [](V& f) { f.params.o = f.q; }, {"o overlaps q"}},
      {"lse_inside_o", [](V& f) { f.params.lse = f.o + 100; }, {"o overlaps lse"}},
      // Only the last sequence's ALiBi row (of three) lies on LSE; the first two lie in the arena's padding
      // between O (216 floats) and LSE (at the next 64-byte boundary, 224 floats after O).
      {"alibi_third_row_on_lse",
       [](V& f) { f.params.alibi_slopes = f.lse - 2 * VarlenFixture::Hq; },
       {"lse overlaps alibi_slopes"}},
  };
}

TEST(VarlenValidationMatrix, EveryRowIsRejectedWithoutWriting) {
  for (Algorithm algorithm : kAllAlgorithms) {
    SCOPED_TRACE(to_string(algorithm));
    CheckRejections<VarlenFixture>(
        VarlenRows(), [](VarlenFixture& f) { f.Make(); },
        [algorithm](VarlenFixture& f) { forward_varlen(f.params, algorithm); },
        [](VarlenFixture& f) { validate(f.params); });
  }
}

TEST(VarlenValidationMatrix, UnknownAlgorithmIsRejectedWithoutWriting) {
  auto run = [](VarlenFixture& f) { forward_varlen(f.params, static_cast<Algorithm>(77)); };
  CheckRejections<VarlenFixture>(
      {{"unknown_algorithm", [](VarlenFixture&) {}, {"algorithm has an unknown value 77"}}},
      [](VarlenFixture& f) { f.Make(); }, run, run);
}

TEST(VarlenValidationMatrix, FixtureCallIsAccepted) {
  VarlenFixture f;
  f.Make();
  EXPECT_NO_THROW(forward_varlen(f.params));
}

}  // namespace
}  // namespace flashattn::testing
