// Global test tensors that every rank draws identically, the rows each rank holds of them, and the
// error measures the MPI tests share.
#ifndef FLASHATTN_TESTS_MPI_MPI_TEST_SUPPORT_H_
#define FLASHATTN_TESTS_MPI_MPI_TEST_SUPPORT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "flashattn/flashattn.h"
#include "support/tensor.h"

namespace flashattn::distributed::testing {

int WorldRank();
int WorldSize();

using support::Tensor;

// Elements drawn from N(0, scale²) by a generator seeded with `seed` (the same on every rank), rounded to
// the element type.
Tensor RandomTensor(std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t dim, DType dtype,
                    std::uint64_t seed, float scale = 1.0f);
// A tensor whose every element is NaN: a test sees any element a call forgot to write.
Tensor NanTensor(std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t dim, DType dtype);
// Rows `rows` (global positions, in order) of `global`, as a tensor of their own.
Tensor SelectRows(const Tensor& global, const std::vector<std::int64_t>& rows);
// LSE rows: (batch, heads, rows) gathered from a (batch, heads, seq) array.
std::vector<float> SelectLseRows(const std::vector<float>& global, std::int64_t batch, std::int64_t heads,
                                 std::int64_t seq, const std::vector<std::int64_t>& rows);

// max |a − b| over the elements of `local`'s rows, compared with the rows `rows` of `global`; NaN if any
// element of `local` is NaN.
double MaxRowError(const Tensor& local, const Tensor& global, const std::vector<std::int64_t>& rows);
double MaxLseError(const std::vector<float>& local, const std::vector<float>& global_rows);
// max |x| over a tensor.
double MaxAbs(const Tensor& tensor);

// The largest of `value` over the ranks of MPI_COMM_WORLD (a NaN anywhere gives +inf).
double MaxOverRanks(double value);

// How a sharded cache's sequences lie over the ranks, as rank `rank` sees them: sequence b has counts_of(b)[r]
// keys on rank r; before[b], mine[b] and total[b] count its keys on the lower ranks, on this one and on all, and
// tail[b] is the rank that appends its new keys (the highest rank with a key of it, rank 0 when none has one).
struct Shards {
  std::vector<std::int64_t> before, mine, total;
  std::vector<int> tail;
};
Shards ShardsOf(std::int64_t batch, int rank, const std::function<std::vector<std::int64_t>(std::int64_t)>& counts_of);

}  // namespace flashattn::distributed::testing

#endif  // FLASHATTN_TESTS_MPI_MPI_TEST_SUPPORT_H_
