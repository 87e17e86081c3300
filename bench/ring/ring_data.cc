#include "ring/ring_data.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "support/elements.h"
#include "flashattn/flashattn.h"

namespace flashattn::ring_bench {
namespace {

// splitmix64: a well-mixed 64-bit hash of the element's coordinates.
std::uint64_t Mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

Tensor MakeRows(int tensor, const std::vector<std::int64_t>& positions, std::int64_t batch, std::int64_t heads,
                std::int64_t dim, DType dtype) {
  Tensor out(batch, static_cast<std::int64_t>(positions.size()), heads, dim, dtype);
  std::vector<float> values;
  values.reserve(static_cast<std::size_t>(out.Elements()));
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t position : positions)
      for (std::int64_t h = 0; h < heads; ++h)
        for (std::int64_t c = 0; c < dim; ++c) {
          const std::uint64_t key =
              (((static_cast<std::uint64_t>(tensor) * 1000003u + b) * 4000000007u + position) * 65537u + h) * 1031u + c;
          values.push_back(static_cast<float>(Mix(key) >> 40) * 0x1p-23f - 1.0f);
        }
  support::ConvertFromF32(values.data(), static_cast<std::int64_t>(values.size()), dtype, out.data());  // contiguous
  return out;
}

std::vector<std::int64_t> Positions(std::int64_t begin, std::int64_t end) {
  std::vector<std::int64_t> positions;
  for (std::int64_t p = begin; p < end; ++p) positions.push_back(p);
  return positions;
}

namespace {

// Every rank's bytes and row positions, on rank 0 (empty elsewhere), rank by rank.
struct RankBlocks {
  std::vector<std::vector<std::byte>> bytes;
  std::vector<std::vector<std::int64_t>> positions;
};

RankBlocks GatherBlocks(const void* data, std::size_t bytes, const std::vector<std::int64_t>& positions) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const std::int64_t mine[2] = {static_cast<std::int64_t>(bytes), static_cast<std::int64_t>(positions.size())};
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(2 * world));
  MPI_Gather(mine, 2, MPI_INT64_T, sizes.data(), 2, MPI_INT64_T, 0, MPI_COMM_WORLD);
  std::vector<int> byte_counts, byte_offsets, row_counts, row_offsets;
  int total_bytes = 0, total_rows = 0;
  for (int r = 0; rank == 0 && r < world; ++r) {
    byte_counts.push_back(static_cast<int>(sizes[2 * r]));
    byte_offsets.push_back(total_bytes);
    total_bytes += byte_counts.back();
    row_counts.push_back(static_cast<int>(sizes[2 * r + 1]));
    row_offsets.push_back(total_rows);
    total_rows += row_counts.back();
  }
  std::vector<std::byte> all_bytes(static_cast<std::size_t>(total_bytes));
  std::vector<std::int64_t> all_rows(static_cast<std::size_t>(total_rows));
  MPI_Gatherv(data, static_cast<int>(bytes), MPI_BYTE, all_bytes.data(), byte_counts.data(), byte_offsets.data(),
              MPI_BYTE, 0, MPI_COMM_WORLD);
  MPI_Gatherv(positions.data(), static_cast<int>(positions.size()), MPI_INT64_T, all_rows.data(), row_counts.data(),
              row_offsets.data(), MPI_INT64_T, 0, MPI_COMM_WORLD);
  RankBlocks blocks;
  for (int r = 0; rank == 0 && r < world; ++r) {
    blocks.bytes.emplace_back(all_bytes.begin() + byte_offsets[r],
                              all_bytes.begin() + byte_offsets[r] + byte_counts[r]);
    blocks.positions.emplace_back(all_rows.begin() + row_offsets[r], all_rows.begin() + row_offsets[r] + row_counts[r]);
  }
  return blocks;
}

}  // namespace

Tensor GatherRows(const Tensor& local, const std::vector<std::int64_t>& positions, std::int64_t total_rows) {
  const RankBlocks blocks = GatherBlocks(local.data(), local.bytes.size(), positions);
  if (blocks.bytes.empty()) return {};
  Tensor whole(local.batch, total_rows, local.heads, local.dim, local.dtype);
  const std::size_t row_bytes = static_cast<std::size_t>(local.heads * local.dim) * size_of(local.dtype);
  for (std::size_t r = 0; r < blocks.bytes.size(); ++r) {
    const std::int64_t rows = static_cast<std::int64_t>(blocks.positions[r].size());
    for (std::int64_t b = 0; b < local.batch; ++b)
      for (std::int64_t i = 0; i < rows; ++i)
        std::memcpy(whole.bytes.data() + (b * total_rows + blocks.positions[r][i]) * row_bytes,
                    blocks.bytes[r].data() + (b * rows + i) * row_bytes, row_bytes);
  }
  return whole;
}

std::vector<float> GatherLse(const std::vector<float>& local, std::int64_t batch, std::int64_t heads,
                             const std::vector<std::int64_t>& positions, std::int64_t total_rows) {
  const RankBlocks blocks = GatherBlocks(local.data(), local.size() * sizeof(float), positions);
  if (blocks.bytes.empty()) return {};
  std::vector<float> whole(static_cast<std::size_t>(batch * heads * total_rows));
  for (std::size_t r = 0; r < blocks.bytes.size(); ++r) {
    const auto* values = reinterpret_cast<const float*>(blocks.bytes[r].data());
    const std::int64_t rows = static_cast<std::int64_t>(blocks.positions[r].size());
    for (std::int64_t bh = 0; bh < batch * heads; ++bh)
      for (std::int64_t i = 0; i < rows; ++i)
        whole[static_cast<std::size_t>(bh * total_rows + blocks.positions[r][i])] = values[bh * rows + i];
  }
  return whole;
}

double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double error = 0.0, scale = 1.0;
  for (std::size_t n = 0; n < a.size(); ++n) {
    if (std::isinf(a[n]) && a[n] == b[n]) continue;  // rows that see no key: −∞ in both
    const double difference = std::abs(static_cast<double>(a[n]) - b[n]);
    error = std::isnan(difference) ? std::numeric_limits<double>::infinity() : std::max(error, difference);
    scale = std::max(scale, std::abs(static_cast<double>(b[n])));
  }
  return error / scale;
}

double RelativeError(const Tensor& a, const Tensor& b) { return RelativeError(a.Floats(), b.Floats()); }

void StartTogether(MPI_Comm comm) {
  MPI_Request request;
  MPI_Ibarrier(comm, &request);
  int done = 0;
  while (MPI_Test(&request, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  MPI_Barrier(comm);
}

}  // namespace flashattn::ring_bench
