// The keyword arguments that flash_attn_func, its varlen form and their backward passes share, applied to
// AttentionSettings. The Python layer fills a Modifiers object from its keywords (flashattn/_arguments.py).
#ifndef FLASHATTN_PYTHON_MODIFIERS_H_
#define FLASHATTN_PYTHON_MODIFIERS_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "flashattn/flashattn.h"

namespace flashattn::python {

namespace py = pybind11;

struct Modifiers {
  float dropout_p = 0.0f;
  std::optional<float> softmax_scale;
  bool causal = false;
  std::int64_t window_left = -1;
  std::int64_t window_right = -1;
  float softcap = 0.0f;
  py::object alibi_slopes = py::none();  // float32 (heads_q,) or (batch, heads_q), C-contiguous
  std::uint64_t seed = 0;
  py::object sinks = py::none();  // float32 (heads_q,), C-contiguous: one attention sink logit per query head
  // flash_attn_func and its backward only. block_mask: None or (kv_num_blocks, kv_indices, full_kv_num_blocks
  // or None, full_kv_indices or None, block_size_q, block_size_k), the arrays int32 C-contiguous (batch, heads,
  // query blocks[, width]); document_ids: None or int32 (batch, seqlen_k), C-contiguous.
  py::object block_mask = py::none();
  py::object document_ids = py::none();
};

// Copies the modifiers into `p` (whose heads_q is set); checks the slopes' shape against (batch, heads_q).
// The slopes stay owned by `m`, which must outlive the call that uses `p`.
void ApplyModifiers(const Modifiers& m, std::int64_t batch, AttentionSettings* p);
// The block mask and the document ids into `p` (whose sizes are set), their shapes checked against them.
void ApplySparsity(const Modifiers& m, AttentionParams* p);
// A block_mask tuple (kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices, block_size_q,
// block_size_k) of a call of `batch` sequences of seqlen_q query rows; None leaves `mask` unset.
void ApplyBlockMask(const py::object& block_mask, std::int64_t batch, std::int64_t seqlen_q, BlockMask* mask);
// The sinks alone, into any ScoreSettings (decode's too); checked against (heads_q,).
void ApplySinks(const py::object& sinks, std::int64_t heads_q, ScoreSettings* p);

// key_indices, the selected keys of a forward or decode call: None (every key), or an int32 C-contiguous
// array of shape (leading..., heads_kv, k), `layout` naming it in messages. The array stays owned by the
// caller's object, which must outlive the call.
KeySelection SelectedKeysOf(const py::object& key_indices, const std::vector<std::int64_t>& leading,
                            std::int64_t heads_kv, const char* layout);

// The sinks' gradient of a backward call: a new float32 (heads_q,) array when the call has sinks (its data
// is BackwardParams::dsinks), else nullopt; and the tuple a backward function returns, (dq, dk, dv) or
// (dq, dk, dv, dsinks).
std::optional<py::array_t<float>> NewSinkGradient(const Modifiers& m, std::int64_t heads_q);
py::tuple Gradients(const py::array& dq, const py::array& dk, const py::array& dv,
                    const std::optional<py::array_t<float>>& dsinks);

// The private keyword block_position of forward and backward (the torch ring's blocks): (query_start,
// key_start, total_seqlen_q, total_seqlen_k) of AttentionSettings::block_position, or None for the whole
// problem.
using BlockPositionArgument = std::optional<std::array<std::int64_t, 4>>;
void ApplyBlockPosition(const BlockPositionArgument& at, AttentionSettings* p);

void RegisterModifiers(py::module_& m);

}  // namespace flashattn::python

#endif  // FLASHATTN_PYTHON_MODIFIERS_H_
