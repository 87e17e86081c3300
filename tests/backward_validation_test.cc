// Rejected inputs of flashattn::backward, table-driven: each case throws flashattn::Error naming the
// argument, for every backward algorithm, and leaves the gradients (and every other byte the caller owns)
// unchanged.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "backward_test_problem.h"
#include "flashattn/backward.h"

namespace flashattn::testing {
namespace {

struct RejectCase {
  std::string name;
  std::function<void(BackwardProblem&)> corrupt;
  std::string expected;  // a part of the message
};

std::vector<RejectCase> Cases() {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  return {
      {"lse_missing", [](BackwardProblem& x) { x.params().attention.lse = nullptr; },
       "attention.lse is required"},
      {"lse_nan", [=](BackwardProblem& x) { x.params().attention.lse[3] = nan; },
       "attention.lse must be finite or -inf"},
      {"lse_plus_inf",
       [](BackwardProblem& x) { x.params().attention.lse[0] = std::numeric_limits<float>::infinity(); },
       "attention.lse must be finite or -inf"},
      {"d_o_null", [](BackwardProblem& x) { x.params().d_o = nullptr; }, "d_o is a null pointer"},
      {"dq_null", [](BackwardProblem& x) { x.params().dq = nullptr; }, "dq is a null pointer"},
      {"dq_overlaps_q", [](BackwardProblem& x) { x.params().dq = const_cast<void*>(x.params().attention.q); },
       "dq overlaps attention.q"},
      {"dk_overlaps_dv", [](BackwardProblem& x) { x.params().dv = x.params().dk; }, "dk overlaps dv"},
      {"dv_overlaps_d_o", [](BackwardProblem& x) { x.params().dv = const_cast<void*>(x.params().d_o); },
       "dv overlaps d_o"},
      {"dq_overlaps_itself", [](BackwardProblem& x) { x.params().dq_strides.seq = 1; }, "dq overlaps itself"},
      {"dk_negative_stride", [](BackwardProblem& x) { x.params().dk_strides.head = -1; }, "dk stride"},
      {"dropout_p_one", [](BackwardProblem& x) { x.params().attention.dropout_p = 1.0f; },
       "dropout_p must be in [0, 1)"},
      {"dropout_p_negative", [](BackwardProblem& x) { x.params().attention.dropout_p = -0.1f; }, "dropout_p"},
      {"dropout_p_nan", [=](BackwardProblem& x) { x.params().attention.dropout_p = nan; }, "dropout_p"},
      {"heads_not_multiple", [](BackwardProblem& x) { x.params().attention.heads_kv = 3; },
       "heads_q must be a multiple"},
  };
}

TEST(BackwardValidationTest, RejectedInputsThrowNamingTheArgumentAndWriteNothing) {
  for (const RejectCase& c : Cases()) {
    for (BackwardAlgorithm algorithm :
         {BackwardAlgorithm::kStandard, BackwardAlgorithm::kFused, BackwardAlgorithm::kOracle}) {
      BackwardProblem x({.batch = 2, .Nq = 5, .Nk = 7, .Hq = 4, .Hkv = 2, .d = 8, .dv = 6}, {.causal = true},
                        1);
      c.corrupt(x);
      const std::vector<std::uint16_t> before = x.GradientBits();
      try {
        backward(x.params(), algorithm);
        ADD_FAILURE() << c.name << ": no error";
      } catch (const Error& error) {
        EXPECT_NE(std::string(error.what()).find(c.expected), std::string::npos)
            << c.name << ": " << error.what();
      }
      EXPECT_EQ(x.GradientBits(), before) << c.name;
    }
  }
}

TEST(BackwardValidationTest, ForwardRejectsDropoutOutOfRange) {
  Problem problem({.Nq = 4, .Nk = 4, .d = 8, .dv = 8}, {}, 1);
  problem.params().dropout_p = 1.5f;
  EXPECT_THROW(forward(problem.params()), Error);
  problem.params().dropout_p = 0.5f;
  EXPECT_NO_THROW(forward(problem.params()));
}

TEST(BackwardValidationTest, MaterializeDropoutMaskValidatesItsParams) {
  Problem problem({.Nq = 4, .Nk = 4, .d = 8, .dv = 8}, {}, 1);
  problem.params().dropout_p = -1.0f;
  std::vector<std::uint8_t> keep(16, 7);
  EXPECT_THROW(materialize_dropout_mask(problem.params(), keep.data()), Error);
  EXPECT_EQ(keep, std::vector<std::uint8_t>(16, 7));
}

}  // namespace
}  // namespace flashattn::testing
