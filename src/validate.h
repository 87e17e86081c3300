// The checks of validate_attention.cc that the public validate() overloads do not cover: the output of the
// dropout mask functions.
#ifndef FLASHATTN_VALIDATE_H_
#define FLASHATTN_VALIDATE_H_

#include <cstdint>

#include "flashattn/forward.h"
#include "flashattn/varlen.h"

namespace flashattn {

// validate(params), and `keep` as materialize_dropout_mask's output of (batch, Hq, Nq, Nk) bytes.
void ValidateDropoutMask(const AttentionParams& params, const std::uint8_t* keep);
// validate(params), and `keep` as the varlen materialize_dropout_mask's output: Hq·Nq_b·Nk_b bytes per
// sequence b.
void ValidateDropoutMask(const VarlenParams& params, const std::uint8_t* keep);

}  // namespace flashattn

#endif  // FLASHATTN_VALIDATE_H_
