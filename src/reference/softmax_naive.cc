// Step 1 of the softmax derivation (docs/algorithms.md): the textbook definition, kept only to show why the later steps
// exist.
#include <cmath>

#include "reference/softmax.h"

namespace flashattn::reference {

void SoftmaxNaive(std::span<const float> x, std::span<float> y) {
  float sum = 0.0f;  // Σ_j e^{x_j}: overflows to inf once any x_j > ln(FLT_MAX) ≈ 88.7
  for (float x_j : x) sum += std::exp(x_j);
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = std::exp(x[i]) / sum;
}

}  // namespace flashattn::reference
