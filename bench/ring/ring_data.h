// The runner's data: every element is a function of (tensor, batch, global position, head, feature), so a
// rank makes its shard and rank 0 the whole sequence without sending inputs; outputs are gathered to rank 0
// by global position for the check.
#ifndef FLASHATTN_BENCH_RING_RING_DATA_H_
#define FLASHATTN_BENCH_RING_RING_DATA_H_

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "flashattn/flashattn.h"
#include "support/tensor.h"

namespace flashattn::ring_bench {

using support::Tensor;

// The rows at global `positions` of tensor number `tensor` (values in [−1, 1), the same on every rank).
Tensor MakeRows(int tensor, const std::vector<std::int64_t>& positions, std::int64_t batch, std::int64_t heads,
                std::int64_t dim, DType dtype);
std::vector<std::int64_t> Positions(std::int64_t begin, std::int64_t end);

// Rank 0 receives every rank's rows (of `local`, at global positions `positions`) and returns the whole
// tensor of `total_rows`; the other ranks return an empty tensor.
Tensor GatherRows(const Tensor& local, const std::vector<std::int64_t>& positions, std::int64_t total_rows);
// The same for float32 (batch, heads, rows) arrays such as the LSE.
std::vector<float> GatherLse(const std::vector<float>& local, std::int64_t batch, std::int64_t heads,
                             const std::vector<std::int64_t>& positions, std::int64_t total_rows);

// max |a − b| / max(1, max |b|) over two tensors of the same shape.
double RelativeError(const Tensor& a, const Tensor& b);
double RelativeError(const std::vector<float>& a, const std::vector<float>& b);

// A barrier that sleeps while it waits, so that an idle rank leaves its core to the ranks still computing
// (MPI_Barrier would spin), then lines the ranks up with MPI_Barrier for a common start.
void StartTogether(MPI_Comm comm);

}  // namespace flashattn::ring_bench

#endif  // FLASHATTN_BENCH_RING_RING_DATA_H_
