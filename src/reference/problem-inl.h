// Template definitions for problem.h.
#ifndef FLASHATTN_REFERENCE_PROBLEM_INL_H_
#define FLASHATTN_REFERENCE_PROBLEM_INL_H_

#include <omp.h>

#include <exception>
#include <mutex>

namespace flashattn::reference {

template <typename Solve>
void ForEachHead(const AttentionParams& params, Solve&& solve, IoCount* io) {
  const std::int64_t problems = params.batch * params.heads_q;
  // An exception may not leave an OpenMP region: the first one is kept and rethrown after it.
  std::exception_ptr failure;
  std::mutex failure_mutex;
  std::mutex io_mutex;
#pragma omp parallel for schedule(dynamic, 1) num_threads(ResolveThreads(params.num_threads))
  for (std::int64_t index = 0; index < problems; ++index) {
    try {
      HeadProblem problem(params, index / params.heads_q, index % params.heads_q);
      solve(problem, omp_get_thread_num());
      if (io != nullptr) {
        const std::lock_guard<std::mutex> lock(io_mutex);
        *io += problem.io();
      }
    } catch (...) {
      const std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace flashattn::reference

#endif  // FLASHATTN_REFERENCE_PROBLEM_INL_H_
