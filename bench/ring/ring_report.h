// Timing helpers and the report of flashattn-ring: per-step medians over the timed calls, exchange-only
// transfer times, the table printed by rank 0 and the --json file read by scripts/ring_simulation.py.
#ifndef FLASHATTN_BENCH_RING_RING_REPORT_H_
#define FLASHATTN_BENCH_RING_RING_REPORT_H_

#include <functional>
#include <string>
#include <vector>

#include "flashattn/distributed.h"
#include "ring/ring_bench.h"

namespace flashattn::ring_bench {

// One timed pass (forward or backward): its wall time (median over calls of the slowest rank's time), the
// one-process time for comparison (0 if not measured), and on rank 0 every rank's per-step medians with the
// exchange-only time of each step's transfers.
struct PassReport {
  std::string name;
  double seconds = 0, single_seconds = 0, flops = 0;
  struct Step {
    distributed::RingStepTiming timing;
    double isolated_seconds = 0;
  };
  std::vector<std::vector<Step>> steps;  // [rank][step], rank 0 only
};

// Times `call` (a collective ring call) `repeats` times after a warm-up; fills seconds and steps.
PassReport TimeRingPass(const std::string& name, const std::function<void()>& call, int repeats);

// Median of `samples`.
double Median(std::vector<double> samples);

void PrintPass(const PassReport& pass);
void WriteJson(const std::string& path, const Options& options, int world, const std::vector<PassReport>& passes,
               const std::vector<std::string>& checks);

}  // namespace flashattn::ring_bench

#endif  // FLASHATTN_BENCH_RING_RING_REPORT_H_
