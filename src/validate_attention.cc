// The settings every attention call shares (HeadSettings, which decode checks here too), then the
// forward, varlen and backward calls, their dropout masks, and merge_attention_states.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

#include "common/score.h"
#include "flashattn/backward.h"
#include "flashattn/forward.h"
#include "flashattn/merge.h"
#include "flashattn/varlen.h"
#include "validate.h"
#include "validate_checks.h"
#include "varlen/sequences.h"

namespace flashattn {
namespace validation {

// Far above any machine's core count; asking OpenMP for more threads than the system can create crashes it.
constexpr std::int64_t kMaxThreads = 1024;

void CheckThreads(int num_threads) { CheckRange("num_threads", num_threads, 0, kMaxThreads); }

namespace {

void CheckHeads(std::int64_t heads_q, std::int64_t heads_kv) {
  CheckSize("heads_q", heads_q, 1);
  CheckSize("heads_kv", heads_kv, 1);
  if (heads_q % heads_kv != 0) {
    Fail("heads_q must be a multiple of heads_kv, got heads_q=", heads_q, " heads_kv=", heads_kv);
  }
}

void CheckModifiers(const ScoreSettings& m, std::int64_t heads_q) {
  CheckSize("window_left", m.window_left, -1);
  CheckSize("window_right", m.window_right, -1);
  if (!(m.softcap >= 0.0f) || !std::isfinite(m.softcap)) {
    Fail("softcap must be finite and >= 0 (0 disables it), got ", m.softcap);
  }
  if (m.scale && !std::isfinite(*m.scale)) Fail("scale must be finite, got ", *m.scale);
  CheckSize("alibi_batch_stride", m.alibi_batch_stride, 0);
  if (m.alibi_batch_stride != 0 && m.alibi_batch_stride < heads_q) {
    Fail("alibi_batch_stride must be 0 (slopes per head) or >= heads_q=", heads_q, ", got ",
         m.alibi_batch_stride);
  }
}

}  // namespace

void CheckDType(const char* name, DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
      return;
  }
  Fail(name, " has an unknown value ", static_cast<int>(dtype));
}

void CheckHeadSettings(const HeadSettings& s) {
  CheckDType("dtype", s.dtype);
  CheckHeads(s.heads_q, s.heads_kv);
  CheckRange("head_dim", s.head_dim, 1, kMaxHeadDim);
  if (s.head_dim_v) CheckRange("head_dim_v", *s.head_dim_v, 1, kMaxHeadDim);
  CheckModifiers(s, s.heads_q);
  CheckThreads(s.num_threads);
}

}  // namespace validation

using namespace validation;

namespace {

// dropout_p in [0, 1), and every element's generator counter ((b·Hq + h)·Nq + i)·⌈Nk/4⌉ + ⌊j/4⌋ in 64 bits.
void CheckDropout(const AttentionSettings& s, std::int64_t batch, std::int64_t seqlen_q, std::int64_t seqlen_k) {
  if (!(s.dropout_p >= 0.0f && s.dropout_p < 1.0f)) Fail("dropout_p must be in [0, 1), got ", s.dropout_p);
  std::int64_t counters;
  if (s.dropout_p > 0.0f &&
      (!MulAdd(batch, s.heads_q, 0, &counters) || !MulAdd(counters, seqlen_q, 0, &counters) ||
       !MulAdd(counters, (seqlen_k + 3) / 4, 0, &counters))) {
    Fail("dropout needs batch·heads_q·seqlen_q·⌈seqlen_k/4⌉ generator counters, more than 2^63 (batch=",
         batch, " heads_q=", s.heads_q, " seqlen_q=", seqlen_q, " seqlen_k=", seqlen_k, ")");
  }
}

// Everything about a batch of `batch` problems of seqlen_q × seqlen_k with these settings but its tensors.
void CheckAttentionSizes(const AttentionSettings& s, std::int64_t batch, std::int64_t seqlen_q,
                         std::int64_t seqlen_k) {
  CheckHeadSettings(s);
  CheckSize("batch", batch, 0);
  CheckSize("seqlen_q", seqlen_q, 0);
  CheckSize("seqlen_k", seqlen_k, 0);
  CheckDropout(s, batch, seqlen_q, seqlen_k);
  CheckSize("tiling.fast_memory_bytes", s.tiling.fast_memory_bytes, 0);
  CheckSize("tiling.block_rows", s.tiling.block_rows, 0);
  CheckSize("tiling.block_cols", s.tiling.block_cols, 0);
  if (s.tiling.fast_memory_bytes > 0 && s.tiling.fast_memory_bytes < 4 * 4 * s.head_dim) {
    Fail("tiling.fast_memory_bytes must hold at least one row of Q, K, V and O (", 4 * 4 * s.head_dim,
         " bytes at head_dim=", s.head_dim, "), got ", s.tiling.fast_memory_bytes);
  }
}

// One side of block_position: [start, start + seqlen) inside [0, total), total −1 meaning seqlen. Totals up to
// kUnboundedReach, so that a diagonal plus a band's reach cannot overflow.
void CheckBlockSide(const char* start_name, std::int64_t start, const char* seqlen_name, std::int64_t seqlen,
                    const char* total_name, std::int64_t total) {
  CheckSize(start_name, start, 0);
  CheckRange(total_name, total, -1, kUnboundedReach);
  const std::int64_t resolved = total < 0 ? seqlen : total;
  if (start > resolved - seqlen) {
    Fail(start_name, " + ", seqlen_name, " = ", start, " + ", seqlen, " exceeds ", total_name, " = ", resolved,
         total < 0 ? " (-1: the call's own length)" : "");
  }
}

// The block mask's and the document ids' settings (their tensors are AttentionTensors', their values
// CheckSparsityValues'). Both describe the whole problem: a call that is a block of a larger one is refused.
void CheckSparsitySizes(const AttentionParams& p) {
  const BlockMask& m = p.block_mask;
  const bool placed = p.block_position != BlockPosition{};
  if (p.document_ids != nullptr) {
    if (p.seqlen_q > p.seqlen_k) {
      Fail("document_ids need seqlen_q <= seqlen_k (query row i sits at key position i + seqlen_k - seqlen_q), got "
           "seqlen_q=", p.seqlen_q, " seqlen_k=", p.seqlen_k);
    }
    if (placed) Fail("document_ids need the default block_position (a whole problem, not a block of one)");
    if (p.document_ids_batch_stride != 0 && p.document_ids_batch_stride < p.seqlen_k) {
      Fail("document_ids_batch_stride must be 0 (contiguous) or >= seqlen_k=", p.seqlen_k, ", got ",
           p.document_ids_batch_stride);
    }
  }
  if (m.active() && placed) Fail("block_mask needs the default block_position (a whole problem, not a block of one)");
  CheckBlockMaskSettings(m, p.heads_q);
}

// The block position, then dropout's generator counters over the whole problem it is a block of.
void CheckAttentionSizes(const AttentionParams& p) {
  CheckAttentionSizes(p, p.batch, p.seqlen_q, p.seqlen_k);
  const BlockPosition& at = p.block_position;
  CheckBlockSide("block_position.query_start", at.query_start, "seqlen_q", p.seqlen_q,
                 "block_position.total_seqlen_q", at.total_seqlen_q);
  CheckBlockSide("block_position.key_start", at.key_start, "seqlen_k", p.seqlen_k, "block_position.total_seqlen_k",
                 at.total_seqlen_k);
  const BlockPlacement placement = BlockPlacement::Of(p);
  CheckDropout(p, p.batch, placement.total_q, placement.total_k);
  CheckSparsitySizes(p);
}

// ---- The tensors of an attention call ---------------------------------------------------------------------

// The names a call's tensors go by in messages: forward's own fields, backward's `attention.` ones, or
// backward_varlen's `forward.` ones.
struct AttentionNames {
  const char *q, *k, *v, *o, *lse, *alibi, *mask, *mask_data, *sinks;
  const char *kv_num_blocks, *kv_indices, *full_kv_num_blocks, *full_kv_indices, *document_ids;

  BlockMaskNames block_mask() const { return {kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices}; }
};
constexpr AttentionNames kForwardNames{
    "q",          "k",     "v", "o", "lse", "alibi_slopes", "mask", "mask.data", "sinks", "block_mask.kv_num_blocks",
    "block_mask.kv_indices", "block_mask.full_kv_num_blocks", "block_mask.full_kv_indices", "document_ids"};
constexpr AttentionNames kBackwardNames{"attention.q",
                                        "attention.k",
                                        "attention.v",
                                        "attention.o",
                                        "attention.lse",
                                        "attention.alibi_slopes",
                                        "attention.mask",
                                        "attention.mask.data",
                                        "attention.sinks",
                                        "attention.block_mask.kv_num_blocks",
                                        "attention.block_mask.kv_indices",
                                        "attention.block_mask.full_kv_num_blocks",
                                        "attention.block_mask.full_kv_indices",
                                        "attention.document_ids"};
constexpr AttentionNames kVarlenBackwardNames{"forward.q",    "forward.k",         "forward.v",
                                              "forward.o",    "forward.lse",       "forward.alibi_slopes",
                                              "forward.mask", "forward.mask.data", "forward.sinks",
                                              "", "", "", "", ""};  // varlen calls have no block mask

struct CallTensors {
  std::vector<TensorView> inputs, outputs;

  // The outputs become inputs: a call that reads the forward pass's results, or writes something else.
  std::vector<TensorView> AllRead() const {
    std::vector<TensorView> read = inputs;
    read.insert(read.end(), outputs.begin(), outputs.end());
    return read;
  }
};

// The block mask's lists and the document ids as inputs.
void AddSparsityTensors(const AttentionParams& p, const AttentionNames& names, CallTensors* t) {
  AddBlockMaskTensors(p.block_mask, names.block_mask(), p.batch, p.seqlen_q, &t->inputs);
  if (p.document_ids != nullptr) {
    const std::int64_t stride = p.document_ids_batch_stride == 0 ? p.seqlen_k : p.document_ids_batch_stride;
    t->inputs.push_back(
        TensorView{names.document_ids, p.document_ids, 4, {{"batch", p.batch, stride}, {"key", p.seqlen_k, 1}}});
  }
}

// q, k, v, the ALiBi slopes and the mask as inputs; o and lse as outputs.
CallTensors AttentionTensors(const AttentionParams& p, const AttentionNames& names) {
  const std::int64_t dv = p.value_head_dim();
  CallTensors t;
  t.inputs = {BatchTensor(names.q, p.q, p.dtype, p.q_strides, p.batch, p.seqlen_q, p.heads_q, p.head_dim),
              BatchTensor(names.k, p.k, p.dtype, p.k_strides, p.batch, p.seqlen_k, p.heads_kv, p.head_dim),
              BatchTensor(names.v, p.v, p.dtype, p.v_strides, p.batch, p.seqlen_k, p.heads_kv, dv)};
  if (p.alibi_slopes != nullptr) {
    t.inputs.push_back(AlibiView(names.alibi, p.alibi_slopes, p.alibi_batch_stride, p.batch, p.heads_q));
  }
  if (p.sinks != nullptr) t.inputs.push_back(SinksView(names.sinks, p.sinks, p.heads_q));
  switch (p.mask.kind) {
    case MaskKind::kNone:
      break;
    case MaskKind::kBool:
    case MaskKind::kAdditive: {
      TensorView mask{names.mask,
                      p.mask.data,
                      p.mask.kind == MaskKind::kBool ? 1 : 4,
                      {{"batch", p.batch, p.mask.stride_batch},
                       {"head", p.heads_q, p.mask.stride_head},
                       {"row", p.seqlen_q, p.mask.stride_row},
                       {"col", p.seqlen_k, p.mask.stride_col}}};
      if (mask.NumElements() > 0 && mask.data == nullptr) {
        Fail(names.mask_data, " is a null pointer but mask.kind is set");
      }
      t.inputs.push_back(mask);
      break;
    }
    default:
      Fail(names.mask, ".kind has an unknown value ", static_cast<int>(p.mask.kind));
  }
  AddSparsityTensors(p, names, &t);
  if (p.key_indices.active()) t.inputs.push_back(KeySelectionView(p.key_indices, p.batch * p.seqlen_q, p.heads_kv));
  t.outputs = {BatchTensor(names.o, p.o, p.dtype, p.o_strides, p.batch, p.seqlen_q, p.heads_q, dv)};
  if (p.lse != nullptr) t.outputs.push_back(LseView(names.lse, p.lse, p.batch, p.heads_q, p.seqlen_q));
  return t;
}

// The block mask's values, once its tensors are known to be readable: every count in [0, width], every index
// in [0, ⌈Nk/Kb⌉), no key block twice in one query block's lists (partial and full together).
void CheckSparsityValues(const AttentionParams& p, const AttentionNames& names) {
  if (!p.block_mask.active()) return;
  CheckBlockMaskLists(p.block_mask, names.block_mask(), p.seqlen_q,
                      std::vector<std::int64_t>(static_cast<std::size_t>(p.batch), p.seqlen_k), "seqlen_k");
}

// ---- Selected keys ----------------------------------------------------------------------------------------

// What key_indices does not combine with: a mask tensor, dropout, a block mask and document ids; with ALiBi, a
// block position whose diagonals are far from the call's keys (the kernel takes their offset as int32).
void CheckSelectionCombinations(const AttentionParams& p) {
  if (!p.key_indices.active()) {
    KeySelectionView(p.key_indices, 0, 0);  // count 0 without indices
    return;
  }
  if (p.mask.kind != MaskKind::kNone) {
    Fail("key_indices and a mask tensor (mask.kind set) do not combine: select the keys the mask keeps instead");
  }
  if (p.dropout_p != 0.0f) Fail("key_indices does not combine with dropout, got dropout_p=", p.dropout_p);
  if (p.block_mask.active() || p.document_ids != nullptr) {
    Fail("key_indices does not combine with a block mask or document_ids: the selected keys are the row's keys "
         "already (block_mask.kv_num_blocks ", p.block_mask.active() ? "set" : "null", ", document_ids ",
         p.document_ids != nullptr ? "set" : "null", ")");
  }
  const std::int64_t shift = BlockPlacement::Of(p).DiagonalOffset() - (p.seqlen_k - p.seqlen_q);
  if (p.alibi_slopes != nullptr && (shift < INT32_MIN || shift > INT32_MAX)) {
    Fail("key_indices with ALiBi needs block_position's diagonals within 2^31 of the call's own (seqlen_k - "
         "seqlen_q), got an offset of ", shift);
  }
  if (p.batch > 0 && p.seqlen_q > INT64_MAX / p.batch) {
    Fail("key_indices is too large to index in 64 bits (batch=", p.batch, " seqlen_q=", p.seqlen_q, ")");
  }
}

// Every list, once the tensor is known to be readable: row i of batch b sees [0, Nk) on its band.
void CheckSelectedKeys(const AttentionParams& p) {
  if (!p.key_indices.active()) return;
  const Band band = Band::Of(p);
  const std::int64_t offset = BlockPlacement::Of(p).DiagonalOffset();
  SelectedLists lists(p.key_indices, p.heads_kv, p.seqlen_k);
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t i = 0; i < p.seqlen_q; ++i) {
      lists.CheckRow({b * p.seqlen_q + i, -1, b, i, p.seqlen_k, "seqlen_k", i + offset, band, p.causal});
    }
}

// dO, read; dQ, dK, dV and dsinks, if requested, written (dsinks only when there are sinks).
void AddGradientTensors(const BackwardParams& p, const AttentionNames& names, CallTensors* t) {
  const AttentionParams& a = p.attention;
  const std::int64_t dv = a.value_head_dim();
  if (p.dsinks != nullptr && a.sinks == nullptr) {
    Fail("dsinks is set but ", names.sinks, " is null: there is no sink to differentiate");
  }
  if (p.dsinks != nullptr) t->outputs.push_back(SinksView("dsinks", p.dsinks, a.heads_q));
  t->inputs.push_back(BatchTensor("d_o", p.d_o, a.dtype, p.do_strides, a.batch, a.seqlen_q, a.heads_q, dv));
  t->outputs.push_back(
      BatchTensor("dq", p.dq, a.dtype, p.dq_strides, a.batch, a.seqlen_q, a.heads_q, a.head_dim));
  t->outputs.push_back(
      BatchTensor("dk", p.dk, a.dtype, p.dk_strides, a.batch, a.seqlen_k, a.heads_kv, a.head_dim));
  t->outputs.push_back(BatchTensor("dv", p.dv, a.dtype, p.dv_strides, a.batch, a.seqlen_k, a.heads_kv, dv));
}

// ---- Varlen -----------------------------------------------------------------------------------------------

// The sizes of a varlen call, then its tensors: the packed ones as one batch-1 problem of total_q × total_k,
// every sequence's ALiBi row and cu_seqlens.
CallTensors VarlenTensors(const VarlenParams& p, const AttentionNames& names) {
  CheckRange("batch", p.batch, 0, INT64_MAX - 1);  // cu_seqlens hold batch + 1 entries
  CheckSize("total_q", p.total_q, 0);
  CheckSize("total_k", p.total_k, 0);
  CheckSize("max_seqlen_q", p.max_seqlen_q, 0);
  CheckSize("max_seqlen_k", p.max_seqlen_k, 0);
  CheckAttentionSizes(p, 1, p.total_q, p.total_k);
  const BlockPosition& at = p.block_position;
  if (at != BlockPosition{}) {
    Fail("block_position must be the default {query_start=0, key_start=0, total_seqlen_q=-1, total_seqlen_k=-1} "
         "in a varlen call (each sequence is its own problem), got {", at.query_start, ", ", at.key_start, ", ",
         at.total_seqlen_q, ", ", at.total_seqlen_k, "}");
  }
  // The packed strides are derived from these sizes.
  const std::int64_t widest = std::max(p.head_dim, p.value_head_dim());
  std::int64_t row_elements;
  if (!MulAdd(p.heads_q, widest, 0, &row_elements)) {
    Fail("a packed row of heads_q=", p.heads_q, " heads of head_dim=", widest, " is too large to index in 64 bits");
  }
  CallTensors t = AttentionTensors(varlen::PackedProblem(p), names);
  if (p.alibi_slopes != nullptr) {
    t.inputs.push_back(AlibiView(names.alibi, p.alibi_slopes, p.alibi_batch_stride, p.batch, p.heads_q));
  }
  t.inputs.push_back(TensorView{"cu_seqlens_q", p.cu_seqlens_q, 4, {{"batch+1", p.batch + 1, 1}}});
  t.inputs.push_back(TensorView{"cu_seqlens_k", p.cu_seqlens_k, 4, {{"batch+1", p.batch + 1, 1}}});
  return t;
}

// The sequence boundaries, once their tensors are known to be readable.
void CheckCuSeqlens(const VarlenParams& p) {
  for (const auto& [name, cu, total, max_len] :
       {std::tuple{"cu_seqlens_q", p.cu_seqlens_q, p.total_q, p.max_seqlen_q},
        std::tuple{"cu_seqlens_k", p.cu_seqlens_k, p.total_k, p.max_seqlen_k}}) {
    if (cu[0] != 0) Fail(name, "[0] must be 0, got ", cu[0]);
    for (std::int64_t b = 0; b < p.batch; ++b) {
      if (cu[b + 1] < cu[b]) {
        Fail(name, " must be non-decreasing, got ", name, "[", b, "]=", cu[b], " > ", name, "[", b + 1,
             "]=", cu[b + 1]);
      }
    }
    for (std::int64_t b = 0; b < p.batch; ++b) {
      if (cu[b + 1] - cu[b] > max_len) {
        Fail("sequence ", b, " has length ", cu[b + 1] - cu[b], " in ", name, ", beyond its max_seqlen of ",
             max_len);
      }
    }
    if (cu[p.batch] != total) {
      Fail(name, " must end at the packed length ", total, ", got ", name, "[", p.batch, "]=", cu[p.batch]);
    }
  }
}

}  // namespace

// ---- The entry points -------------------------------------------------------------------------------------

void validate(const AttentionParams& p) {
  CheckAttentionSizes(p);
  CheckSelectionCombinations(p);
  const CallTensors t = AttentionTensors(p, kForwardNames);
  CheckOutputs(t.outputs, t.inputs);
  CheckSinkValues("sinks", p.sinks, p.heads_q);
  CheckSparsityValues(p, kForwardNames);
  CheckSelectedKeys(p);
}

void ValidateDropoutMask(const AttentionParams& p, const std::uint8_t* keep) {
  validate(p);
  std::int64_t row = p.seqlen_k, head, batch;  // strides of the contiguous (batch, Hq, Nq, Nk) mask
  if (!MulAdd(p.seqlen_q, row, 0, &head) || !MulAdd(p.heads_q, head, 0, &batch)) {
    Fail("keep is too large to index in 64 bits (heads_q=", p.heads_q, " seqlen_q=", p.seqlen_q,
         " seqlen_k=", p.seqlen_k, ")");
  }
  const TensorView mask{"keep", keep, 1,
                        {{"batch", p.batch, batch},
                         {"head", p.heads_q, head},
                         {"row", p.seqlen_q, row},
                         {"col", p.seqlen_k, 1}}};
  CheckOutputs({mask}, AttentionTensors(p, kForwardNames).AllRead());  // o and lse are not written here
}

void validate(const VarlenParams& p) {
  const CallTensors t = VarlenTensors(p, kForwardNames);
  CheckOutputs(t.outputs, t.inputs);
  CheckSinkValues("sinks", p.sinks, p.heads_q);
  CheckCuSeqlens(p);
}

void ValidateDropoutMask(const VarlenParams& p, const std::uint8_t* keep) {
  validate(p);
  std::int64_t elements = 0;  // Σ_b Hq·Nq_b·Nk_b
  for (std::int64_t b = 0; b < p.batch; ++b) {
    std::int64_t pairs;
    const std::int64_t Nq = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
    const std::int64_t Nk = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
    if (!MulAdd(Nq, Nk, 0, &pairs) || !MulAdd(pairs, p.heads_q, elements, &elements)) {
      Fail("keep is too large to index in 64 bits (heads_q=", p.heads_q, ", sequence ", b, " of seqlen_q=", Nq,
           " seqlen_k=", Nk, ")");
    }
  }
  const TensorView mask{"keep", keep, 1, {{"element", elements, 1}}};
  CheckOutputs({mask}, VarlenTensors(p, kForwardNames).AllRead());  // o and lse are not written here
}

void validate(const MergeParams& p) {
  CheckDType("dtype", p.dtype);
  CheckSize("num_partials", p.num_partials, 0);
  CheckSize("batch", p.batch, 0);
  CheckSize("seqlen", p.seqlen, 0);
  CheckSize("heads", p.heads, 1);
  CheckRange("head_dim_v", p.head_dim_v, 1, kMaxHeadDim);
  std::int64_t rows, partial_elements;  // rows per partial; elements of one partial's O
  if (!MulAdd(p.batch, p.seqlen, 0, &rows) || !MulAdd(rows, p.heads, 0, &rows) ||
      !MulAdd(rows, p.head_dim_v, 0, &partial_elements)) {
    Fail("o_partials is too large to index in 64 bits (batch=", p.batch, " seqlen=", p.seqlen,
         " heads=", p.heads, " head_dim_v=", p.head_dim_v, ")");
  }
  const TensorView o_partials{
      "o_partials",
      p.o_partials,
      4,
      {{"partial", p.num_partials, partial_elements}, {"row", rows, p.head_dim_v}, {"dim", p.head_dim_v, 1}}};
  const TensorView lse_partials{
      "lse_partials", p.lse_partials, 4, {{"partial", p.num_partials, rows}, {"row", rows, 1}}};
  std::vector<TensorView> outputs = {
      BatchTensor("o", p.o, p.dtype, p.o_strides, p.batch, p.seqlen, p.heads, p.head_dim_v)};
  if (p.lse != nullptr) outputs.push_back(LseView("lse", p.lse, p.batch, p.heads, p.seqlen));
  std::vector<TensorView> inputs = {o_partials, lse_partials};
  if (p.sinks != nullptr) inputs.push_back(SinksView("sinks", p.sinks, p.heads));
  CheckOutputs(outputs, inputs);
  CheckSinkValues("sinks", p.sinks, p.heads);
  for (std::int64_t n = 0; n < p.num_partials * rows; ++n) {
    const float lse = p.lse_partials[n];
    if (std::isnan(lse) || lse == std::numeric_limits<float>::infinity()) {
      Fail("lse_partials must be finite or -inf, got ", lse, " at partial ", n / rows, " row ", n % rows);
    }
  }
}

// The forward call's tensors, o and lse included, are all read; the gradients are written.
void validate(const BackwardParams& p) {
  const AttentionParams& a = p.attention;
  CheckAttentionSizes(a);  // shapes, modifiers, dropout, as the forward pass saw them
  if (a.key_indices.active() || a.key_indices.count != 0) {
    Fail("attention.key_indices is set, but the backward pass of attention over selected keys is not "
         "implemented (the selected keys are for inference)");
  }
  RequireLse("attention.lse", "backward", a.lse, a.batch, a.heads_q, a.seqlen_q);
  CallTensors t{AttentionTensors(a, kBackwardNames).AllRead(), {}};
  AddGradientTensors(p, kBackwardNames, &t);
  CheckOutputs(t.outputs, t.inputs);
  CheckSinkValues("attention.sinks", a.sinks, a.heads_q);
  CheckSparsityValues(a, kBackwardNames);
  CheckLseValues("attention.lse", a.lse, a.batch, a.heads_q, a.seqlen_q);
}

void validate(const VarlenBackwardParams& p) {
  const VarlenParams& f = p.forward;
  CallTensors t{VarlenTensors(f, kVarlenBackwardNames).AllRead(), {}};
  RequireLse("forward.lse", "backward_varlen", f.lse, 1, f.heads_q, f.total_q);
  AddGradientTensors(varlen::PackedProblem(p), kVarlenBackwardNames, &t);
  CheckOutputs(t.outputs, t.inputs);
  CheckSinkValues("forward.sinks", f.sinks, f.heads_q);
  CheckCuSeqlens(f);
  CheckLseValues("forward.lse", f.lse, 1, f.heads_q, f.total_q);
}

}  // namespace flashattn
