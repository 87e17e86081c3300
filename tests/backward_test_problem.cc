#include "backward_test_problem.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "common/element.h"
#include "reference/backward.h"

namespace flashattn::testing {

namespace {
std::int64_t Slots(DType dtype) { return dtype == DType::kF32 ? 2 : 1; }
float Get(const std::vector<std::uint16_t>& data, DType dtype, const Strides& s, std::int64_t b,
          std::int64_t i, std::int64_t h, std::int64_t c) {
  return LoadAsFloat(data.data(), dtype, b * s.batch + i * s.seq + h * s.head + c);
}
}  // namespace

BackwardProblem::BackwardProblem(const Shape& shape, const Modifiers& modifiers, std::uint64_t seed,
                                 Dropout dropout, Algorithm forward_algorithm)
    : forward_(shape, modifiers, seed) {
  AttentionParams& a = forward_.params();
  a.dropout_p = dropout.p;
  a.dropout_seed = dropout.seed;
  a.dropout_offset = dropout.offset;
  flashattn::forward(a, forward_algorithm);
  params_.attention = a;
  params_.do_strides = a.o_strides, params_.dq_strides = a.q_strides;
  params_.dk_strides = a.k_strides, params_.dv_strides = a.v_strides;
  const std::int64_t slots = Slots(shape.dtype);
  do_.resize(std::max<std::int64_t>(1, shape.batch * shape.Nq * shape.Hq * shape.dv * slots));
  dq_.resize(std::max<std::int64_t>(1, shape.batch * shape.Nq * shape.Hq * shape.d * slots));
  dk_.resize(std::max<std::int64_t>(1, shape.batch * shape.Nk * shape.Hkv * shape.d * slots));
  dv_.resize(std::max<std::int64_t>(1, shape.batch * shape.Nk * shape.Hkv * shape.dv * slots));
  params_.d_o = do_.data(), params_.dq = dq_.data(), params_.dk = dk_.data(), params_.dv = dv_.data();
  std::mt19937_64 rng(seed ^ 0x5eed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (std::int64_t b = 0; b < shape.batch; ++b)
    for (std::int64_t i = 0; i < shape.Nq; ++i)
      for (std::int64_t h = 0; h < shape.Hq; ++h)
        for (std::int64_t c = 0; c < shape.dv; ++c) SetDO(b, i, h, c, normal(rng));
  ResetGradients();
}

void BackwardProblem::RecomputeForward(Algorithm algorithm) {
  flashattn::forward(forward_.params(), algorithm);
  params_.attention = forward_.params();
}

void BackwardProblem::SetDO(std::int64_t b, std::int64_t i, std::int64_t h, std::int64_t c, float value) {
  const Strides& s = params_.do_strides;
  StoreFromFloat(do_.data(), shape().dtype, b * s.batch + i * s.seq + h * s.head + c, value);
}

void BackwardProblem::ResetGradients() {
  for (auto* data : {&dq_, &dk_, &dv_}) std::fill(data->begin(), data->end(), 0x7e00);  // NaN in every type
}

std::vector<std::uint16_t> BackwardProblem::GradientBits() const {
  std::vector<std::uint16_t> bits(dq_);
  bits.insert(bits.end(), dk_.begin(), dk_.end());
  bits.insert(bits.end(), dv_.begin(), dv_.end());
  return bits;
}

float BackwardProblem::dQ(std::int64_t b, std::int64_t i, std::int64_t h, std::int64_t c) const {
  return Get(dq_, shape().dtype, params_.dq_strides, b, i, h, c);
}
float BackwardProblem::dK(std::int64_t b, std::int64_t j, std::int64_t h, std::int64_t c) const {
  return Get(dk_, shape().dtype, params_.dk_strides, b, j, h, c);
}
float BackwardProblem::dV(std::int64_t b, std::int64_t j, std::int64_t h, std::int64_t c) const {
  return Get(dv_, shape().dtype, params_.dv_strides, b, j, h, c);
}

namespace {
struct Accumulator {
  double max_diff = 0.0, max_ref = 0.0;
  void Add(double actual, double expected) {
    const double diff = std::fabs(actual - expected);
    max_diff = std::isnan(diff) ? std::numeric_limits<double>::infinity() : std::max(max_diff, diff);
    max_ref = std::max(max_ref, std::fabs(expected));
  }
  double Error() const { return max_ref > 0 ? max_diff / max_ref : max_diff; }
};
}  // namespace

GradientErrors CompareGradientsWithOracle(const BackwardProblem& problem) {
  const Shape& s = problem.shape();
  const std::int64_t group = s.Hq / s.Hkv;
  Accumulator dq, dk, dv;
  for (std::int64_t b = 0; b < s.batch; ++b) {
    for (std::int64_t hkv = 0; hkv < s.Hkv; ++hkv) {
      const reference::OracleGradients ref = reference::OracleBackwardGroup(problem.params(), b, hkv);
      for (std::int64_t hg = 0; hg < group; ++hg)
        for (std::int64_t i = 0; i < s.Nq; ++i)
          for (std::int64_t c = 0; c < s.d; ++c)
            dq.Add(problem.dQ(b, i, hkv * group + hg, c), ref.dQ[(hg * s.Nq + i) * s.d + c]);
      for (std::int64_t j = 0; j < s.Nk; ++j) {
        for (std::int64_t c = 0; c < s.d; ++c) dk.Add(problem.dK(b, j, hkv, c), ref.dK[j * s.d + c]);
        for (std::int64_t c = 0; c < s.dv; ++c) dv.Add(problem.dV(b, j, hkv, c), ref.dV[j * s.dv + c]);
      }
    }
  }
  return {dq.Error(), dk.Error(), dv.Error()};
}

}  // namespace flashattn::testing
