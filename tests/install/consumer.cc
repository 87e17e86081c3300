// A downstream program built against the installed flashattn: it computes a small grouped-query, causal
// problem with the default algorithm, checks it against a float64 loop written here, checks that a bad
// call throws flashattn::Error across the library boundary, and calls every other public function (so a
// function the library does not export fails to link). Exit status 0 only if all of that holds.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "flashattn/flashattn.h"

namespace {

constexpr int B = 2, Nq = 5, Nk = 7, Hq = 4, Hkv = 2, d = 16;

// O_i = Σ_j softmax_j(s·q_i·k_j) v_j over the keys j ≤ i + Nk − Nq, in float64; returns the row's LSE.
double ReferenceRow(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                    int b, int i, int h, double* out) {
  const int kv = h / (Hq / Hkv);
  const double s = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> S;
  double m = -std::numeric_limits<double>::infinity();
  for (int j = 0; j <= i + Nk - Nq; ++j) {
    double dot = 0;
    for (int c = 0; c < d; ++c)
      dot += double{q[((b * Nq + i) * Hq + h) * d + c]} * k[((b * Nk + j) * Hkv + kv) * d + c];
    S.push_back(s * dot);
    m = std::max(m, s * dot);
  }
  double l = 0;
  for (int c = 0; c < d; ++c) out[c] = 0;
  for (int j = 0; j < static_cast<int>(S.size()); ++j) {
    const double p = std::exp(S[j] - m);
    l += p;
    for (int c = 0; c < d; ++c) out[c] += p * v[((b * Nk + j) * Hkv + kv) * d + c];
  }
  for (int c = 0; c < d; ++c) out[c] /= l;
  return m + std::log(l);
}

// Calls every public function not used above. Each call but the last has default parameters, whose head
// dimension of 0 it must reject with flashattn::Error, as parse_algorithm must reject "flash3". Returns
// whether all of them did.
bool CallEveryEntryPoint() {
  int calls = 0, errors = 0;
  auto call = [&](auto&& run) {
    ++calls;
    try {
      run();
    } catch (const flashattn::Error&) {
      ++errors;
    }
  };
  flashattn::AttentionParams attention;
  attention.set_head_major_strides();
  flashattn::VarlenParams varlen;
  flashattn::MergeParams merge;
  merge.set_contiguous_strides();
  flashattn::DecodeParams decode;
  decode.set_contiguous_strides();
  flashattn::BackwardParams backward;
  backward.set_contiguous_strides();
  backward.set_head_major_strides();
  flashattn::VarlenBackwardParams varlen_backward;
  std::uint8_t keep = 0;
  call([&] { flashattn::validate(attention); });
  call([&] { flashattn::materialize_dropout_mask(attention, &keep); });
  call([&] { flashattn::validate(varlen); });
  call([&] { flashattn::forward_varlen(varlen); });
  call([&] { flashattn::materialize_dropout_mask(varlen, &keep); });
  call([&] { flashattn::validate(merge); });
  call([&] { flashattn::merge_attention_states(merge); });
  call([&] { flashattn::validate(decode); });
  call([&] { flashattn::decode(decode); });
  call([&] { flashattn::validate(backward); });
  call([&] { flashattn::backward(backward); });
  call([&] { flashattn::validate(varlen_backward); });
  call([&] { flashattn::backward_varlen(varlen_backward); });
  call([&] { flashattn::parse_algorithm("flash3"); });
  std::printf("consumer: %s, %zu-byte %s, %lld splits\n",
              std::string(flashattn::to_string(flashattn::parse_algorithm("flash2"))).c_str(),
              flashattn::size_of(flashattn::DType::kBF16),
              std::string(flashattn::to_string(flashattn::DType::kBF16)).c_str(),
              static_cast<long long>(flashattn::choose_num_splits(1, 4096, 2)));
  std::printf("consumer: %d of %d calls rejected their parameters\n", errors, calls);
  return errors == calls;
}

}  // namespace

int main() {
  std::vector<float> q(B * Nq * Hq * d), k(B * Nk * Hkv * d), v(B * Nk * Hkv * d), o(B * Nq * Hq * d),
      lse(B * Hq * Nq);
  for (std::size_t n = 0; n < q.size(); ++n) q[n] = std::sin(0.37f * n);
  for (std::size_t n = 0; n < k.size(); ++n) k[n] = std::cos(0.11f * n);
  for (std::size_t n = 0; n < v.size(); ++n) v[n] = std::sin(0.05f * n + 1.0f);

  flashattn::AttentionParams p;
  p.q = q.data(), p.k = k.data(), p.v = v.data(), p.o = o.data(), p.lse = lse.data();
  p.batch = B, p.seqlen_q = Nq, p.seqlen_k = Nk, p.heads_q = Hq, p.heads_kv = Hkv, p.head_dim = d;
  p.causal = true;
  p.set_contiguous_strides();
  flashattn::forward(p);

  double max_error = 0;
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < Nq; ++i)
      for (int h = 0; h < Hq; ++h) {
        double expected[d];
        const double expected_lse = ReferenceRow(q, k, v, b, i, h, expected);
        for (int c = 0; c < d; ++c)
          max_error = std::max(max_error, std::abs(o[((b * Nq + i) * Hq + h) * d + c] - expected[c]));
        max_error = std::max(max_error, std::abs(lse[(b * Hq + h) * Nq + i] - expected_lse));
      }
  std::printf("consumer: max |error| against float64 = %.3g\n", max_error);
  if (!(max_error <= 1e-5)) return 1;

  p.heads_kv = 3;  // Hq % Hkv != 0
  try {
    flashattn::forward(p);
    std::printf("consumer: forward accepted heads_q=4 heads_kv=3\n");
    return 1;
  } catch (const flashattn::Error& e) {
    std::printf("consumer: rejected as expected: %s\n", e.what());
  }
  return CallEveryEntryPoint() ? 0 : 1;
}
