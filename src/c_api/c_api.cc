// The C API (include/flashattn/c_api.h) over the C++ one. Each C struct is converted field by field into its
// C++ counterpart (convert.h, the only place that knows both), and each call runs inside Guarded(), which
// turns every exception into a status and keeps its message for flashattn_last_error(). The C++ entry points
// validate before they write, so a failed call leaves the caller's memory as it was.
#include "flashattn/c_api.h"

#include <algorithm>
#include <cstddef>
#include <exception>
#include <new>
#include <string>
#include <utility>

#include "c_api/convert.h"
#include "common/checked.h"
#include "flashattn/backward.h"
#include "flashattn/decode.h"
#include "flashattn/indexer.h"
#include "flashattn/flashattn.h"
#include "flashattn/working_memory.h"

namespace flashattn {
namespace {

// The calling thread's last message. `last_error_text` points into `last_error` or, if keeping the message
// failed for want of memory, at a fixed text.
thread_local std::string last_error;
thread_local const char* last_error_text = "";

void SetLastError(const char* message) noexcept {
  try {
    last_error = message;
    last_error_text = last_error.c_str();
  } catch (...) {
    last_error_text = "out of memory (the original error message could not be kept)";
  }
}

template <typename Call>
flashattn_status Guarded(const Call& call) noexcept {
  try {
    call();
    SetLastError("");
    return FLASHATTN_OK;
  } catch (const Error& error) {
    SetLastError(error.what());
    return FLASHATTN_ERROR_INVALID_ARGUMENT;
  } catch (const std::bad_alloc&) {
    SetLastError("out of memory");
    return FLASHATTN_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception& error) {
    SetLastError(error.what());
    return FLASHATTN_ERROR_INTERNAL;
  } catch (...) {
    SetLastError("an exception that is not a std::exception");
    return FLASHATTN_ERROR_INTERNAL;
  }
}

template <typename T>
const T& Deref(const T* params) {
  if (params == nullptr) Fail("params must not be null");
  return *params;
}

// validate() of the C++ counterpart of a C parameter struct.
template <typename CParams>
flashattn_status Validate(const CParams* params) noexcept {
  return Guarded([&] { validate(c_api::ToCpp(Deref(params))); });
}

// Sets the strides of a C struct as `set` sets them on its C++ counterpart, made by the mapping the entry
// points use: so the C++ helper sees every field it reads. A struct the mapping rejects (an unknown enum
// value) keeps its strides, and flashattn_last_error() says why.
template <typename CParams, typename Set>
void SetStrides(CParams* params, const Set& set) noexcept {
  if (params == nullptr) return;
  Guarded([&] {
    auto p = c_api::ToCpp(*params);
    set(p);
    c_api::CopyStrides(p, *params);
  });
}

}  // namespace
}  // namespace flashattn

using namespace flashattn;

extern "C" {

const char* flashattn_version(void) { return FLASHATTN_VERSION; }

const char* flashattn_last_error(void) { return last_error_text; }

const char* flashattn_status_string(flashattn_status status) {
  switch (c_api::RawValue(status)) {
    case FLASHATTN_OK: return "ok";
    case FLASHATTN_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case FLASHATTN_ERROR_OUT_OF_MEMORY: return "out of memory";
    case FLASHATTN_ERROR_INTERNAL: return "internal error";
  }
  return "unknown status";
}

void flashattn_attention_params_init(flashattn_attention_params* params) {
  if (params) *params = c_api::DefaultAttention();
}

void flashattn_varlen_params_init(flashattn_varlen_params* params) {
  if (params) *params = c_api::DefaultVarlen();
}

void flashattn_merge_params_init(flashattn_merge_params* params) {
  if (params) *params = c_api::DefaultMerge();
}

void flashattn_decode_params_init(flashattn_decode_params* params) {
  if (params) *params = c_api::DefaultDecode();
}

void flashattn_quantize_params_init(flashattn_quantize_params* params) {
  if (params) *params = c_api::DefaultQuantize();
}

void flashattn_indexer_params_init(flashattn_indexer_params* params) {
  if (params) *params = c_api::DefaultIndexer();
}

void flashattn_backward_params_init(flashattn_backward_params* params) {
  if (params) *params = c_api::DefaultBackward();
}

void flashattn_varlen_backward_params_init(flashattn_varlen_backward_params* params) {
  if (params) *params = c_api::DefaultVarlenBackward();
}

void flashattn_attention_params_set_contiguous_strides(flashattn_attention_params* params) {
  SetStrides(params, [](AttentionParams& p) { p.set_contiguous_strides(); });
}

void flashattn_attention_params_set_head_major_strides(flashattn_attention_params* params) {
  SetStrides(params, [](AttentionParams& p) { p.set_head_major_strides(); });
}

void flashattn_merge_params_set_contiguous_strides(flashattn_merge_params* params) {
  SetStrides(params, [](MergeParams& p) { p.set_contiguous_strides(); });
}

void flashattn_decode_params_set_contiguous_strides(flashattn_decode_params* params) {
  SetStrides(params, [](DecodeParams& p) { p.set_contiguous_strides(); });
}

void flashattn_quantize_params_set_contiguous_strides(flashattn_quantize_params* params) {
  SetStrides(params, [](QuantizeParams& p) { p.set_contiguous_strides(); });
}

void flashattn_indexer_params_set_contiguous_strides(flashattn_indexer_params* params) {
  SetStrides(params, [](IndexerParams& p) { p.set_contiguous_strides(); });
}

void flashattn_backward_params_set_contiguous_strides(flashattn_backward_params* params) {
  SetStrides(params, [](BackwardParams& p) { p.set_contiguous_strides(); });
}

void flashattn_backward_params_set_head_major_strides(flashattn_backward_params* params) {
  SetStrides(params, [](BackwardParams& p) { p.set_head_major_strides(); });
}

flashattn_status flashattn_validate_forward(const flashattn_attention_params* params) {
  return Validate(params);
}

flashattn_status flashattn_validate_forward_varlen(const flashattn_varlen_params* params) {
  return Validate(params);
}

flashattn_status flashattn_validate_merge(const flashattn_merge_params* params) {
  return Validate(params);
}

flashattn_status flashattn_validate_decode(const flashattn_decode_params* params) {
  return Validate(params);
}

flashattn_status flashattn_validate_lightning_indexer(const flashattn_indexer_params* params) {
  return Validate(params);
}

flashattn_status flashattn_validate_backward(const flashattn_backward_params* params) {
  return Validate(params);
}

flashattn_status flashattn_validate_backward_varlen(const flashattn_varlen_backward_params* params) {
  return Validate(params);
}

flashattn_status flashattn_forward(const flashattn_attention_params* params, flashattn_algorithm algorithm) {
  return Guarded([&] { forward(c_api::ToCpp(Deref(params)), c_api::ToAlgorithm(algorithm)); });
}

flashattn_status flashattn_forward_varlen(const flashattn_varlen_params* params, flashattn_algorithm algorithm) {
  return Guarded([&] { forward_varlen(c_api::ToCpp(Deref(params)), c_api::ToAlgorithm(algorithm)); });
}

flashattn_status flashattn_merge_attention_states(const flashattn_merge_params* params) {
  return Guarded([&] { merge_attention_states(c_api::ToCpp(Deref(params))); });
}

flashattn_status flashattn_decode(const flashattn_decode_params* params) {
  return Guarded([&] { decode(c_api::ToCpp(Deref(params))); });
}

flashattn_status flashattn_lightning_indexer(const flashattn_indexer_params* params) {
  return Guarded([&] { lightning_indexer(c_api::ToCpp(Deref(params))); });
}

flashattn_status flashattn_quantize_kv(const flashattn_quantize_params* params) {
  return Guarded([&] { quantize_kv(c_api::ToCpp(Deref(params))); });
}

flashattn_status flashattn_choose_num_splits(int64_t batch, int64_t max_seqlen_k, int num_threads,
                                             int64_t* num_splits) {
  return Guarded([&] {
    if (num_splits == nullptr) Fail("num_splits must not be null");
    *num_splits = choose_num_splits(batch, max_seqlen_k, num_threads);
  });
}

flashattn_status flashattn_backward(const flashattn_backward_params* params,
                                    flashattn_backward_algorithm algorithm) {
  return Guarded([&] { backward(c_api::ToCpp(Deref(params)), c_api::ToBackwardAlgorithm(algorithm)); });
}

flashattn_status flashattn_backward_varlen(const flashattn_varlen_backward_params* params,
                                           flashattn_backward_algorithm algorithm) {
  return Guarded([&] { backward_varlen(c_api::ToCpp(Deref(params)), c_api::ToBackwardAlgorithm(algorithm)); });
}

flashattn_status flashattn_materialize_dropout_mask(const flashattn_attention_params* params, uint8_t* keep) {
  return Guarded([&] { materialize_dropout_mask(c_api::ToCpp(Deref(params)), keep); });
}

flashattn_status flashattn_materialize_dropout_mask_varlen(const flashattn_varlen_params* params, uint8_t* keep) {
  return Guarded([&] { materialize_dropout_mask(c_api::ToCpp(Deref(params)), keep); });
}

flashattn_status flashattn_create_block_mask(int64_t batch, int64_t seqlen_q, int64_t seqlen_k, int64_t block_size_q,
                                             int64_t block_size_k, bool causal, int64_t window_left,
                                             int64_t window_right, const int32_t* document_ids,
                                             int64_t document_ids_batch_stride, int32_t* kv_num_blocks,
                                             int32_t* kv_indices, int32_t* full_kv_num_blocks,
                                             int32_t* full_kv_indices) {
  return Guarded([&] {
    const BlockMaskLists m = create_block_mask(batch, seqlen_q, seqlen_k, block_size_q, block_size_k, causal,
                                               window_left, window_right, document_ids, document_ids_batch_stride);
    for (auto [name, out] : {std::pair{"kv_num_blocks", kv_num_blocks}, std::pair{"kv_indices", kv_indices},
                             std::pair{"full_kv_num_blocks", full_kv_num_blocks},
                             std::pair{"full_kv_indices", full_kv_indices}}) {
      if (out == nullptr && m.kv_num_blocks.size() > 0) Fail(name, " is a null pointer");
    }
    std::copy(m.kv_num_blocks.begin(), m.kv_num_blocks.end(), kv_num_blocks);
    std::copy(m.kv_indices.begin(), m.kv_indices.end(), kv_indices);
    std::copy(m.full_kv_num_blocks.begin(), m.full_kv_num_blocks.end(), full_kv_num_blocks);
    std::copy(m.full_kv_indices.begin(), m.full_kv_indices.end(), full_kv_indices);
  });
}

void flashattn_set_working_memory_limit(size_t bytes_per_thread) { set_working_memory_limit(bytes_per_thread); }

size_t flashattn_working_memory_limit(void) { return working_memory_limit(); }

void flashattn_release_working_memory(void) { release_working_memory(); }

size_t flashattn_retained_working_memory(void) { return retained_working_memory(); }

}  // extern "C"
