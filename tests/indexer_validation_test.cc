// Rejected inputs of lightning_indexer(): each a flashattn::Error naming the argument and its value, the same
// from validate() alone, with key_indices and scores left unchanged.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "flashattn/indexer.h"
#include "indexer_test_case.h"

namespace flashattn::testing {
namespace {

struct BadInput {
  const char* name;
  std::int64_t page_size;
  CacheElement element;
  std::function<void(IndexerCase&)> spoil;
  const char* message;  // a fragment the error must contain
};

class IndexerRejects : public ::testing::TestWithParam<BadInput> {};

TEST_P(IndexerRejects, WithAClearErrorAndTheOutputsUnchanged) {
  const BadInput& bad = GetParam();
  IndexerCase c({.keys = {20, 7}, .Nq = 2, .heads = 4, .d = 16, .top_k = 5, .dtype = DType::kF16,
                 .element = bad.element, .page_size = bad.page_size}, 1);
  bad.spoil(c);
  std::string message;
  try {
    lightning_indexer(c.params());
    ADD_FAILURE() << "no error";
  } catch (const Error& error) {
    message = error.what();
    EXPECT_NE(message.find(bad.message), std::string::npos) << message;
  }
  try {  // validate() alone: the same message
    validate(c.params());
    ADD_FAILURE() << "validate: no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.what(), message);
  }
  for (const std::int32_t index : c.indices()) EXPECT_EQ(index, kUnwrittenIndex);
  for (const float score : c.scores()) EXPECT_EQ(score, 777.0f);
}

constexpr CacheElement kFloat = CacheElement::kFloat, kInt8 = CacheElement::kInt8;

const BadInput kBadInputs[] = {
    {"dtype", 0, kFloat, [](IndexerCase& c) { c.params().dtype = static_cast<DType>(9); }, "dtype"},
    {"batch", 0, kFloat, [](IndexerCase& c) { c.params().batch = -1; }, "batch must be >= 0, got -1"},
    {"seqlen_q", 0, kFloat, [](IndexerCase& c) { c.params().seqlen_q = -2; }, "seqlen_q must be >= 0, got -2"},
    {"heads", 0, kFloat, [](IndexerCase& c) { c.params().heads = 0; }, "heads must be >= 1, got 0"},
    {"head_dim_zero", 0, kFloat, [](IndexerCase& c) { c.params().head_dim = 0; },
     "head_dim must be in [1, 576], got 0"},
    {"head_dim_large", 0, kFloat, [](IndexerCase& c) { c.params().head_dim = 577; },
     "head_dim must be in [1, 576], got 577"},
    {"top_k", 0, kFloat, [](IndexerCase& c) { c.params().top_k = 0; }, "top_k must be >= 1, got 0"},
    {"num_threads", 0, kFloat, [](IndexerCase& c) { c.params().num_threads = -1; },
     "num_threads must be in [0, 1024], got -1"},
    {"cache_element", 0, kFloat, [](IndexerCase& c) { c.params().cache_element = static_cast<CacheElement>(7); },
     "cache_element has an unknown value 7"},
    {"cache_dtype", 0, kFloat, [](IndexerCase& c) { c.params().cache_dtype = static_cast<DType>(5); }, "cache_dtype"},
    {"float_with_scale", 0, kFloat, [](IndexerCase& c) { c.params().k_scale = c.weights().data(); },
     "k_scale must be null for a float cache"},
    {"quantized_without_scale", 0, kInt8, [](IndexerCase& c) { c.params().k_scale = nullptr; },
     "k_scale is a null pointer but cache_element=int8"},
    {"cache_seqlen_max", 0, kFloat, [](IndexerCase& c) { c.params().cache_seqlen_max = -1; },
     "cache_seqlen_max must be >= 0, got -1"},
    {"page_size", 16, kFloat, [](IndexerCase& c) { c.params().page_size = 0; }, "page_size must be >= 1, got 0"},
    {"num_pages", 16, kFloat, [](IndexerCase& c) { c.params().num_pages = -3; }, "num_pages must be >= 0, got -3"},
    {"block_table_stride", 16, kFloat, [](IndexerCase& c) { c.params().block_table_stride = 1; },
     "block_table_stride must be >= 3, got 1"},
    {"max_pages", 16, kFloat, [](IndexerCase& c) { c.params().max_pages = -1; }, "max_pages must be >= 0, got -1"},
    {"k_scale_stride", 0, kInt8, [](IndexerCase& c) { c.params().scale_strides.seq = -1; },
     "k_scale stride of dimension 'seq' must be >= 0, got -1"},
    {"k_scale_null_rows", 0, kInt8,
     [](IndexerCase& c) {
       c.params().k_scale = nullptr;
       c.params().cache_element = CacheElement::kFp8E4M3;
     },
     "k_scale is a null pointer but cache_element=fp8_e4m3"},
    {"output_too_large", 0, kFloat, [](IndexerCase& c) { c.params().top_k = std::int64_t{1} << 62; },
     "batch·seqlen_q·top_k is too large"},
    {"paged_without_seqlens", 16, kFloat, [](IndexerCase& c) { c.params().cache_seqlens = nullptr; },
     "cache_seqlens is a null pointer but the cache is paged"},
    {"q_null", 0, kFloat, [](IndexerCase& c) { c.params().q = nullptr; }, "q is a null pointer"},
    {"k_null", 0, kFloat, [](IndexerCase& c) { c.params().k_cache = nullptr; }, "k_cache is a null pointer"},
    {"weights_null", 0, kFloat, [](IndexerCase& c) { c.params().weights = nullptr; }, "weights is a null pointer"},
    {"indices_null", 0, kFloat, [](IndexerCase& c) { c.params().key_indices = nullptr; },
     "key_indices is a null pointer"},
    {"q_stride", 0, kFloat, [](IndexerCase& c) { c.params().q_strides.seq = -4; },
     "q stride of dimension 'seq' must be >= 0, got -4"},
    {"scores_overlap_indices", 0, kFloat,
     [](IndexerCase& c) { c.params().scores = reinterpret_cast<float*>(c.params().key_indices + 1); },
     "key_indices overlaps scores"},
    {"indices_overlap_weights", 0, kFloat,
     [](IndexerCase& c) { c.params().key_indices = reinterpret_cast<std::int32_t*>(c.weights().data()); },
     "key_indices overlaps weights"},
    {"seqlens_negative", 0, kFloat, [](IndexerCase& c) { c.seqlens()[1] = -1; },
     "cache_seqlens[1] must be in [0, 23]"},
    {"seqlens_beyond_capacity", 16, kFloat, [](IndexerCase& c) { c.seqlens()[0] = 49; },
     "cache_seqlens[0] must be in [0, 48]"},
    {"block_table_entry", 16, kFloat, [](IndexerCase& c) { c.table()[1] = 99; },
     "block_table[0][1] = 99 is out of range [0, num_pages=9)"},
    {"cache_seqlen_max_without_seqlens", 0, kFloat,
     [](IndexerCase& c) {
       c.params().cache_seqlens = nullptr;
       c.params().cache_seqlen_max = std::int64_t{1} << 32;
     },
     "cache_seqlen_max must be in [0, 2147483647]"},
};

INSTANTIATE_TEST_SUITE_P(Inputs, IndexerRejects, ::testing::ValuesIn(kBadInputs),
                         [](const ::testing::TestParamInfo<BadInput>& info) { return std::string(info.param.name); });

TEST(IndexerValidation, ValidInputsPassAndEmptyCallsWriteNothing) {
  IndexerCase c({.keys = {20, 7}, .Nq = 2, .heads = 4, .d = 16, .top_k = 5}, 2);
  EXPECT_NO_THROW(validate(c.params()));
  c.params().seqlen_q = 0;
  EXPECT_NO_THROW(lightning_indexer(c.params()));
  for (const std::int32_t index : c.indices()) EXPECT_EQ(index, kUnwrittenIndex);
}

}  // namespace
}  // namespace flashattn::testing
