#include "mpi_test_support.h"

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "distributed/element_cast.h"
#include "flashattn/flashattn.h"

namespace flashattn::distributed::testing {

int WorldRank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int WorldSize() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

Tensor RandomTensor(std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t dim, DType dtype,
                    std::uint64_t seed, float scale) {
  Tensor tensor(batch, seq, heads, dim, dtype);
  std::mt19937_64 generator(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> values(static_cast<std::size_t>(tensor.Elements()));
  for (float& value : values) value = normal(generator);
  tensor.Assign(values);
  return tensor;
}

Tensor NanTensor(std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t dim, DType dtype) {
  Tensor tensor(batch, seq, heads, dim, dtype);
  tensor.Assign(
      std::vector<float>(static_cast<std::size_t>(tensor.Elements()), std::numeric_limits<float>::quiet_NaN()));
  return tensor;
}

Tensor SelectRows(const Tensor& global, const std::vector<std::int64_t>& rows) {
  Tensor local(global.batch, static_cast<std::int64_t>(rows.size()), global.heads, global.dim, global.dtype);
  const std::size_t row_bytes = static_cast<std::size_t>(global.heads * global.dim) * size_of(global.dtype);
  for (std::int64_t b = 0; b < global.batch; ++b)
    for (std::size_t i = 0; i < rows.size(); ++i)
      std::memcpy(local.bytes.data() + (b * local.seq + static_cast<std::int64_t>(i)) * row_bytes,
                  global.bytes.data() + (b * global.seq + rows[i]) * row_bytes, row_bytes);
  return local;
}

std::vector<float> SelectLseRows(const std::vector<float>& global, std::int64_t batch, std::int64_t heads,
                                 std::int64_t seq, const std::vector<std::int64_t>& rows) {
  std::vector<float> local;
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t row : rows) local.push_back(global[static_cast<std::size_t>((b * heads + h) * seq + row)]);
  return local;
}

double MaxRowError(const Tensor& local, const Tensor& global, const std::vector<std::int64_t>& rows) {
  double error = 0.0;
  for (std::int64_t b = 0; b < local.batch; ++b)
    for (std::size_t i = 0; i < rows.size(); ++i)
      for (std::int64_t h = 0; h < local.heads; ++h)
        for (std::int64_t c = 0; c < local.dim; ++c) {
          const double got = local.At(b, static_cast<std::int64_t>(i), h, c);
          if (std::isnan(got)) return std::numeric_limits<double>::quiet_NaN();
          error = std::max(error, std::abs(got - global.At(b, rows[i], h, c)));
        }
  return error;
}

double MaxLseError(const std::vector<float>& local, const std::vector<float>& global_rows) {
  double error = 0.0;
  for (std::size_t n = 0; n < local.size(); ++n) {
    if (std::isnan(local[n])) return std::numeric_limits<double>::quiet_NaN();
    if (std::isinf(local[n]) || std::isinf(global_rows[n])) {
      if (local[n] != global_rows[n]) return std::numeric_limits<double>::infinity();
      continue;
    }
    error = std::max(error, static_cast<double>(std::abs(local[n] - global_rows[n])));
  }
  return error;
}

double MaxAbs(const Tensor& tensor) {
  double largest = 0.0;
  for (float value : tensor.Floats()) largest = std::max(largest, static_cast<double>(std::abs(value)));
  return largest;
}

double MaxOverRanks(double value) {
  // NaN compares false with everything: it travels as +inf, which wins and fails any bound.
  double mine = std::isnan(value) ? std::numeric_limits<double>::infinity() : value, largest = 0.0;
  MPI_Allreduce(&mine, &largest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return largest;
}

Shards ShardsOf(std::int64_t batch, int rank, const std::function<std::vector<std::int64_t>(std::int64_t)>& counts_of) {
  Shards shards;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::vector<std::int64_t> counts = counts_of(b);
    const int world = static_cast<int>(counts.size());
    std::int64_t before = 0, total = 0;
    for (int r = 0; r < world; ++r) {
      total += counts[r];
      if (r < rank) before += counts[r];
    }
    int tail = world - 1;
    while (tail > 0 && counts[tail] == 0) --tail;
    shards.before.push_back(before);
    shards.mine.push_back(counts[rank]);
    shards.total.push_back(total);
    shards.tail.push_back(tail);
  }
  return shards;
}

}  // namespace flashattn::distributed::testing
