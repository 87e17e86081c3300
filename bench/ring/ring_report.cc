#include "ring/ring_report.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "flashattn/distributed.h"
#include "ring/ring_data.h"

namespace flashattn::ring_bench {
namespace {

using distributed::RingStepTiming;

int Rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int World() {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  return world;
}

// Each step's transfers again, with nothing to overlap: every rank receives, for each step, as many bytes
// as it received then, from the previous rank (which sends them), and the exchange is timed alone.
std::vector<double> IsolatedTransfers(const std::vector<RingStepTiming>& steps, int repeats) {
  const int rank = Rank(), world = World();
  std::vector<std::int64_t> mine, all(static_cast<std::size_t>(world) * steps.size());
  for (const RingStepTiming& step : steps) mine.push_back(step.bytes);
  MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_INT64_T, all.data(), static_cast<int>(mine.size()),
                MPI_INT64_T, MPI_COMM_WORLD);
  const int next = (rank + 1) % world, previous = (rank + world - 1) % world;
  std::vector<double> seconds;
  for (std::size_t s = 0; s < steps.size(); ++s) {
    const std::int64_t receive = mine[s], send = all[static_cast<std::size_t>(next) * steps.size() + s];
    std::vector<char> in(static_cast<std::size_t>(receive)), out(static_cast<std::size_t>(send), 1);
    std::vector<double> samples;
    for (int repeat = 0; repeat < repeats; ++repeat) {
      MPI_Barrier(MPI_COMM_WORLD);
      const auto start = std::chrono::steady_clock::now();
      MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
      if (receive > 0)
        MPI_Irecv(in.data(), static_cast<int>(receive), MPI_BYTE, previous, 9, MPI_COMM_WORLD, &requests[0]);
      if (send > 0) MPI_Isend(out.data(), static_cast<int>(send), MPI_BYTE, next, 9, MPI_COMM_WORLD, &requests[1]);
      MPI_Waitall(2, requests, MPI_STATUSES_IGNORE);
      samples.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    seconds.push_back(receive > 0 ? Median(samples) : 0.0);
  }
  return seconds;
}

}  // namespace

double Median(std::vector<double> samples) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  const std::size_t n = samples.size();
  return n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
}

PassReport TimeRingPass(const std::string& name, const std::function<void()>& call, int repeats) {
  PassReport pass;
  pass.name = name;
  std::vector<double> elapsed;
  std::vector<std::vector<RingStepTiming>> runs;
  for (int run = 0; run <= repeats; ++run) {  // run 0 warms up
    StartTogether(MPI_COMM_WORLD);
    const auto start = std::chrono::steady_clock::now();
    call();
    double mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), slowest = 0;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (run == 0) continue;
    elapsed.push_back(slowest);
    runs.push_back(distributed::last_ring_timings());
  }
  pass.seconds = Median(elapsed);
  // Per-step medians of this rank, then the exchange-only times, gathered to rank 0.
  const std::size_t steps = runs.front().size();
  std::vector<double> mine;
  std::vector<RingStepTiming> medians(steps);
  for (std::size_t s = 0; s < steps; ++s) {
    std::vector<double> compute, transfer, wait;
    for (const auto& run : runs) {
      compute.push_back(run[s].compute_seconds), transfer.push_back(run[s].transfer_seconds);
      wait.push_back(run[s].wait_seconds);
    }
    medians[s] = {Median(compute), Median(transfer), Median(wait), runs.front()[s].bytes};
  }
  const std::vector<double> isolated = IsolatedTransfers(medians, std::max(3, repeats));
  for (std::size_t s = 0; s < steps; ++s) {
    mine.insert(mine.end(), {medians[s].compute_seconds, medians[s].transfer_seconds, medians[s].wait_seconds,
                             static_cast<double>(medians[s].bytes), isolated[s]});
  }
  std::vector<double> all(mine.size() * static_cast<std::size_t>(World()));
  MPI_Gather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(), static_cast<int>(mine.size()),
             MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (Rank() == 0) {
    for (int r = 0; r < World(); ++r) {
      std::vector<PassReport::Step> rank_steps;
      for (std::size_t s = 0; s < steps; ++s) {
        const double* v = all.data() + (static_cast<std::size_t>(r) * steps + s) * 5;
        rank_steps.push_back({{v[0], v[1], v[2], static_cast<std::int64_t>(v[3])}, v[4]});
      }
      pass.steps.push_back(rank_steps);
    }
  }
  return pass;
}

void PrintPass(const PassReport& pass) {
  std::printf("\n%s: %.4f s (median of the slowest rank)", pass.name.c_str(), pass.seconds);
  if (pass.flops > 0) std::printf(", %.1f GFLOP/s", pass.flops / pass.seconds * 1e-9);
  if (pass.single_seconds > 0) {
    std::printf("; one process: %.4f s, ring throughput / one process = %.3f", pass.single_seconds,
                pass.single_seconds / pass.seconds);
  }
  std::printf("\n  rank step  compute ms  transfer ms  alone ms   wait ms  hidden     MB\n");
  double total_wait = 0, total_alone = 0;
  for (std::size_t r = 0; r < pass.steps.size(); ++r)
    for (std::size_t s = 0; s < pass.steps[r].size(); ++s) {
      const PassReport::Step& step = pass.steps[r][s];
      char hidden[16] = "     -";
      if (step.isolated_seconds > 0) {
        const double fraction = std::clamp(1.0 - step.timing.wait_seconds / step.isolated_seconds, 0.0, 1.0);
        std::snprintf(hidden, sizeof hidden, "%5.1f%%", 100.0 * fraction);
        total_wait += std::min(step.timing.wait_seconds, step.isolated_seconds);
        total_alone += step.isolated_seconds;
      }
      std::printf("  %4zu %4zu %11.3f %12.3f %9.3f %9.3f  %s %6.1f\n", r, s, 1e3 * step.timing.compute_seconds,
                  1e3 * step.timing.transfer_seconds, 1e3 * step.isolated_seconds, 1e3 * step.timing.wait_seconds,
                  hidden, static_cast<double>(step.timing.bytes) / (1 << 20));
    }
  if (total_alone > 0) std::printf("  transfer hidden overall: %.1f%%\n", 100.0 * (1.0 - total_wait / total_alone));
}

void WriteJson(const std::string& path, const Options& o, int world, const std::vector<PassReport>& passes,
               const std::vector<std::string>& checks) {
  std::ofstream out(path);
  out << "{\n  \"mode\": \"" << o.mode << "\", \"world\": " << world << ", \"batch\": " << o.batch
      << ", \"seqlen\": " << o.seqlen << ", \"heads\": " << o.heads << ", \"heads_kv\": " << o.HeadsKv()
      << ", \"head_dim\": " << o.head_dim << ", \"causal\": " << (o.causal ? "true" : "false")
      << ", \"window_left\": " << o.window_left << ", \"window_right\": " << o.window_right << ", \"layout\": \""
      << o.layout << "\", \"dtype\": \"" << o.dtype << "\", \"threads\": " << o.threads
      << ", \"cache_len\": " << o.cache_len << ",\n  \"checks\": [";
  for (std::size_t n = 0; n < checks.size(); ++n) out << (n ? ", " : "") << "\"" << checks[n] << "\"";
  out << "],\n  \"passes\": [";
  for (std::size_t p = 0; p < passes.size(); ++p) {
    const PassReport& pass = passes[p];
    out << (p ? "," : "") << "\n    {\"name\": \"" << pass.name << "\", \"seconds\": " << pass.seconds
        << ", \"single_seconds\": " << pass.single_seconds << ", \"flops\": " << pass.flops << ", \"steps\": [";
    for (std::size_t r = 0; r < pass.steps.size(); ++r) {
      out << (r ? "," : "") << "\n      [";
      for (std::size_t s = 0; s < pass.steps[r].size(); ++s) {
        const PassReport::Step& step = pass.steps[r][s];
        out << (s ? ", " : "") << "{\"compute\": " << step.timing.compute_seconds
            << ", \"transfer\": " << step.timing.transfer_seconds << ", \"wait\": " << step.timing.wait_seconds
            << ", \"alone\": " << step.isolated_seconds << ", \"bytes\": " << step.timing.bytes << "}";
      }
      out << "]";
    }
    out << "]}";
  }
  out << "\n  ]\n}\n";
}

}  // namespace flashattn::ring_bench
