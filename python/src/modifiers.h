// The keyword arguments that flash_attn_func, its varlen form and their backward passes share, applied to
// AttentionSettings. The Python layer fills a Modifiers object from its keywords (flashattn/_arguments.py).
#ifndef FLASHATTN_PYTHON_MODIFIERS_H_
#define FLASHATTN_PYTHON_MODIFIERS_H_

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <cstdint>
#include <optional>

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
};

// Copies the modifiers into `p` (whose heads_q is set); checks the slopes' shape against (batch, heads_q).
// The slopes stay owned by `m`, which must outlive the call that uses `p`.
void ApplyModifiers(const Modifiers& m, std::int64_t batch, AttentionSettings* p);

// The private keyword block_position of forward and backward (the torch ring's blocks): (query_start,
// key_start, total_seqlen_q, total_seqlen_k) of AttentionSettings::block_position, or None for the whole
// problem.
using BlockPositionArgument = std::optional<std::array<std::int64_t, 4>>;
void ApplyBlockPosition(const BlockPositionArgument& at, AttentionSettings* p);

void RegisterModifiers(py::module_& m);

}  // namespace flashattn::python

#endif  // FLASHATTN_PYTHON_MODIFIERS_H_
