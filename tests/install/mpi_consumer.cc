// A downstream MPI program built against the installed flashattn::mpi: ring attention over the ranks of
// MPI_COMM_WORLD on a small causal zigzag problem, checked row by row against forward() on the whole
// sequence. Exit status 0 only if every rank's rows match.
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "flashattn/distributed.h"
#include "flashattn/flashattn.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  constexpr int N = 37, H = 2, d = 8;
  std::vector<float> q(N * H * d), k(q.size()), v(q.size()), o(q.size());
  for (std::size_t n = 0; n < q.size(); ++n) {
    q[n] = std::sin(0.37f * n), k[n] = std::cos(0.11f * n), v[n] = std::sin(0.05f * n + 1.0f);
  }
  flashattn::AttentionParams whole;
  whole.q = q.data(), whole.k = k.data(), whole.v = v.data(), whole.o = o.data();
  whole.seqlen_q = whole.seqlen_k = N, whole.heads_q = whole.heads_kv = H, whole.head_dim = d;
  whole.causal = true;
  whole.set_contiguous_strides();
  flashattn::forward(whole);

  namespace dist = flashattn::distributed;
  const std::vector<std::int64_t> rows = dist::shard_indices(N, world, rank, dist::ShardLayout::kZigzag);
  std::vector<float> lq, lk, lv, lo(rows.size() * H * d);
  for (std::int64_t row : rows) {
    lq.insert(lq.end(), q.begin() + row * H * d, q.begin() + (row + 1) * H * d);
    lk.insert(lk.end(), k.begin() + row * H * d, k.begin() + (row + 1) * H * d);
    lv.insert(lv.end(), v.begin() + row * H * d, v.begin() + (row + 1) * H * d);
  }
  dist::RingParams ring;
  ring.local = whole;
  ring.local.q = lq.data(), ring.local.k = lk.data(), ring.local.v = lv.data(), ring.local.o = lo.data();
  ring.local.seqlen_q = ring.local.seqlen_k = static_cast<std::int64_t>(rows.size());
  ring.local.set_contiguous_strides();
  ring.seqlen = N;
  dist::ring_forward(ring, MPI_COMM_WORLD);

  double error = 0;
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (int e = 0; e < H * d; ++e) error = std::fmax(error, std::fabs(lo[i * H * d + e] - o[rows[i] * H * d + e]));
  std::printf("rank %d of %d: %zu rows, max |ring - forward| = %.3g\n", rank, world, rows.size(), error);
  MPI_Finalize();
  return error < 1e-5 ? 0 : 1;
}
