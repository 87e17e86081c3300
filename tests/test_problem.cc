#include "test_problem.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>

#include "common/element.h"
#include "reference/reference.h"

namespace flashattn::testing {

std::string Shape::ToString() const {
  std::ostringstream s;
  s << "b" << batch << "_nq" << Nq << "_nk" << Nk << "_hq" << Hq << "_hkv" << Hkv << "_d" << d << "_dv" << dv
    << "_" << flashattn::to_string(dtype) << (head_major ? "_bhsd" : "_bshd");
  return s.str();
}

std::string Modifiers::ToString() const {
  std::ostringstream s;
  s << (causal ? "causal" : "full");
  auto reach = [](std::int64_t w) { return w < 0 ? std::string("inf") : std::to_string(w); };
  if (window_left >= 0 || window_right >= 0) s << "_win" << reach(window_left) << "_" << reach(window_right);
  if (softcap > 0) s << "_cap" << static_cast<int>(softcap);
  if (alibi) s << "_alibi";
  if (mask == MaskKind::kBool) s << "_boolmask";
  if (mask == MaskKind::kAdditive) s << "_addmask";
  return s.str();
}

std::vector<Modifiers> ModifierMatrix() {
  return {
      {},
      {.causal = true},
      {.window_left = 16, .window_right = 8},
      {.window_left = 0, .window_right = -1},
      {.causal = true, .window_left = 32},
      {.softcap = 5.0f},
      {.alibi = true},
      {.mask = MaskKind::kBool},
      {.mask = MaskKind::kAdditive},
      {.causal = true, .softcap = 3.0f, .alibi = true, .mask = MaskKind::kAdditive},
  };
}

std::vector<Shape> ShapeGrid(const std::vector<std::int64_t>& head_dims,
                             const std::vector<std::pair<std::int64_t, std::int64_t>>& lengths) {
  std::vector<Shape> shapes;
  for (std::int64_t d : head_dims)
    for (auto [Nq, Nk] : lengths) shapes.push_back({.Nq = Nq, .Nk = Nk, .d = d, .dv = d});
  return shapes;
}

std::vector<Shape> ForwardShapeMatrix() {
  std::vector<Shape> shapes =
      ShapeGrid({1, 40, 59, 64, 111, 128, 256}, {{1, 1}, {97, 113}, {113, 97}, {1, 1025}});
  shapes.push_back({.batch = 1, .Nq = 1025, .Nk = 1025, .Hq = 1, .Hkv = 1, .d = 64, .dv = 64});
  shapes.push_back({.batch = 2, .Nq = 97, .Nk = 113, .Hq = 4, .Hkv = 2, .d = 40, .dv = 40});
  shapes.push_back({.batch = 1, .Nq = 113, .Nk = 1025, .Hq = 6, .Hkv = 1, .d = 59, .dv = 59});
  shapes.push_back({.batch = 1, .Nq = 97, .Nk = 97, .Hq = 2, .Hkv = 1, .d = 111, .dv = 40});
  shapes.push_back(
      {.batch = 2, .Nq = 113, .Nk = 97, .Hq = 3, .Hkv = 3, .d = 40, .dv = 256, .head_major = true});
  return shapes;
}

std::vector<Shape> BackwardShapeMatrix() {
  std::vector<Shape> shapes =
      ShapeGrid({1, 40, 59, 64, 111, 128, 256}, {{1, 1}, {97, 113}, {113, 97}, {1, 97}});
  shapes.push_back({.Nq = 1025, .Nk = 1025, .d = 8, .dv = 8});
  shapes.push_back({.Nq = 1025, .Nk = 113, .d = 40, .dv = 40});
  shapes.push_back({.Nq = 97, .Nk = 1025, .d = 64, .dv = 64});
  shapes.push_back({.batch = 2, .Nq = 97, .Nk = 113, .Hq = 4, .Hkv = 2, .d = 40, .dv = 40});   // GQA
  shapes.push_back({.batch = 1, .Nq = 113, .Nk = 257, .Hq = 6, .Hkv = 1, .d = 59, .dv = 59});  // MQA
  shapes.push_back({.batch = 1, .Nq = 97, .Nk = 97, .Hq = 2, .Hkv = 1, .d = 111, .dv = 40});   // d ≠ dv
  shapes.push_back(
      {.batch = 2, .Nq = 113, .Nk = 97, .Hq = 3, .Hkv = 3, .d = 40, .dv = 72, .head_major = true});
  return shapes;
}

namespace {
std::int64_t Slots(DType dtype) { return dtype == DType::kF32 ? 2 : 1; }
}  // namespace

Problem::Problem(const Shape& shape, const Modifiers& mod, std::uint64_t seed, float input_scale)
    : shape_(shape) {
  AttentionParams& p = params_;
  p.batch = shape.batch;
  p.seqlen_q = shape.Nq;
  p.seqlen_k = shape.Nk;
  p.heads_q = shape.Hq;
  p.heads_kv = shape.Hkv;
  p.head_dim = shape.d;
  p.head_dim_v = shape.dv;
  p.dtype = shape.dtype;
  p.causal = mod.causal;
  p.window_left = mod.window_left;
  p.window_right = mod.window_right;
  p.softcap = mod.softcap;
  if (shape.head_major) p.set_head_major_strides(); else p.set_contiguous_strides();

  const std::int64_t slots = Slots(shape.dtype);
  q_.resize(std::max<std::int64_t>(1, shape.batch * shape.Nq * shape.Hq * shape.d * slots));
  k_.resize(std::max<std::int64_t>(1, shape.batch * shape.Nk * shape.Hkv * shape.d * slots));
  v_.resize(std::max<std::int64_t>(1, shape.batch * shape.Nk * shape.Hkv * shape.dv * slots));
  o_.resize(std::max<std::int64_t>(1, shape.batch * shape.Nq * shape.Hq * shape.dv * slots));
  lse_.resize(std::max<std::int64_t>(1, shape.batch * shape.Hq * shape.Nq));
  p.q = q_.data();
  p.k = k_.data();
  p.v = v_.data();
  p.o = o_.data();
  p.lse = lse_.data();

  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (std::int64_t b = 0; b < shape.batch; ++b) {
    for (std::int64_t i = 0; i < shape.Nq; ++i)
      for (std::int64_t h = 0; h < shape.Hq; ++h)
        for (std::int64_t c = 0; c < shape.d; ++c) SetQ(b, i, h, c, input_scale * normal(rng));
    for (std::int64_t j = 0; j < shape.Nk; ++j)
      for (std::int64_t h = 0; h < shape.Hkv; ++h) {
        for (std::int64_t c = 0; c < shape.d; ++c) SetK(b, j, h, c, input_scale * normal(rng));
        for (std::int64_t c = 0; c < shape.dv; ++c) SetV(b, j, h, c, normal(rng));
      }
  }
  if (mod.alibi) {  // per (batch, head) slopes, the more general of the two layouts
    alibi_.resize(shape.batch * shape.Hq);
    for (std::size_t n = 0; n < alibi_.size(); ++n) alibi_[n] = std::exp2(-8.0f * (n % shape.Hq + 1) / shape.Hq) + 0.01f * (n / shape.Hq);
    p.alibi_slopes = alibi_.data();
    p.alibi_batch_stride = shape.Hq;
  }
  if (mod.mask != MaskKind::kNone) {
    // Broadcast over batch (stride 0), one plane per head: the PyTorch (1, H, Lq, Lk) shape.
    const std::int64_t plane = shape.Nq * shape.Nk;
    p.mask = {mod.mask, nullptr, 0, plane, shape.Nk, 1};
    std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
    if (mod.mask == MaskKind::kBool) {
      mask_bool_.resize(std::max<std::int64_t>(1, shape.Hq * plane));
      for (auto& keep : mask_bool_) keep = uniform(rng) < 0.8f;
      p.mask.data = mask_bool_.data();
    } else {
      mask_additive_.resize(std::max<std::int64_t>(1, shape.Hq * plane));
      for (auto& bias : mask_additive_) {
        const float u = uniform(rng);
        bias = u < 0.1f ? -std::numeric_limits<float>::infinity() : 2.0f * u - 1.0f;
      }
      p.mask.data = mask_additive_.data();
    }
  }
  ResetOutputs();
}

void Problem::ResetOutputs() {
  std::fill(o_.begin(), o_.end(), 0x7e00);  // float16 NaN; as float32 pairs, a NaN too (0x7e007e00)
  std::fill(lse_.begin(), lse_.end(), std::numeric_limits<float>::quiet_NaN());
}

namespace {
void Set(std::vector<std::uint16_t>& data, DType dtype, const Strides& s, std::int64_t b, std::int64_t i,
         std::int64_t h, std::int64_t c, float value) {
  StoreFromFloat(data.data(), dtype, b * s.batch + i * s.seq + h * s.head + c, value);
}
}  // namespace

void Problem::SetQ(std::int64_t b, std::int64_t i, std::int64_t h, std::int64_t c, float value) {
  Set(q_, shape_.dtype, params_.q_strides, b, i, h, c, value);
}
void Problem::SetK(std::int64_t b, std::int64_t j, std::int64_t h, std::int64_t c, float value) {
  Set(k_, shape_.dtype, params_.k_strides, b, j, h, c, value);
}
void Problem::SetV(std::int64_t b, std::int64_t j, std::int64_t h, std::int64_t c, float value) {
  Set(v_, shape_.dtype, params_.v_strides, b, j, h, c, value);
}

float Problem::O(std::int64_t b, std::int64_t i, std::int64_t h, std::int64_t c) const {
  const Strides& s = params_.o_strides;
  return LoadAsFloat(o_.data(), shape_.dtype, b * s.batch + i * s.seq + h * s.head + c);
}

void SetPackedSequences(const std::vector<std::int32_t>& cu_q, const std::vector<std::int32_t>& cu_k,
                        VarlenParams* params) {
  params->batch = static_cast<std::int64_t>(cu_q.size()) - 1;
  params->total_q = cu_q.back(), params->total_k = cu_k.back();
  params->cu_seqlens_q = cu_q.data(), params->cu_seqlens_k = cu_k.data();
  params->max_seqlen_q = params->max_seqlen_k = 0;
  for (std::int64_t b = 0; b < params->batch; ++b) {
    params->max_seqlen_q = std::max<std::int64_t>(params->max_seqlen_q, cu_q[b + 1] - cu_q[b]);
    params->max_seqlen_k = std::max<std::int64_t>(params->max_seqlen_k, cu_k[b + 1] - cu_k[b]);
  }
}

void ErrorsAccumulator::AddO(double actual, double expected) {
  const double diff = std::fabs(actual - expected);
  max_diff_ = std::isnan(diff) ? std::numeric_limits<double>::infinity() : std::max(max_diff_, diff);
  max_ref_ = std::max(max_ref_, std::fabs(expected));
}

void ErrorsAccumulator::AddLse(double actual, double expected) {
  double error;
  if (std::isinf(expected) || std::isinf(actual)) {
    error = expected == actual ? 0.0 : std::numeric_limits<double>::infinity();
  } else {
    error = std::fabs(actual - expected) / std::max(1.0, std::fabs(expected));
    if (std::isnan(error)) error = std::numeric_limits<double>::infinity();
  }
  lse_error_ = std::max(lse_error_, error);
}

Errors CompareWithOracle(const Problem& problem, bool check_lse) {
  const Shape& shape = problem.shape();
  ErrorsAccumulator errors;
  for (std::int64_t b = 0; b < shape.batch; ++b) {
    for (std::int64_t h = 0; h < shape.Hq; ++h) {
      const reference::OracleRows ref = reference::OracleHeadRows(problem.params(), b, h, 0, shape.Nq);
      for (std::int64_t i = 0; i < shape.Nq; ++i) {
        for (std::int64_t c = 0; c < shape.dv; ++c) errors.AddO(problem.O(b, i, h, c), ref.o[i * shape.dv + c]);
        if (check_lse) errors.AddLse(problem.Lse(b, h, i), ref.lse[i]);
      }
    }
  }
  return errors.Result();
}

std::vector<float> OutputValues(const Problem& problem) {
  const Shape& s = problem.shape();
  std::vector<float> out;
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.Hq; ++h)
      for (std::int64_t i = 0; i < s.Nq; ++i) {
        for (std::int64_t c = 0; c < s.dv; ++c) out.push_back(problem.O(b, i, h, c));
        out.push_back(problem.Lse(b, h, i));
      }
  return out;
}

bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace flashattn::testing
