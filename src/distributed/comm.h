// The MPI side of a collective call: its own communicator, and non-blocking transfers that are waited for
// with a deadline, so that a rank which leaves a call makes the others fail instead of hang.
#ifndef FLASHATTN_DISTRIBUTED_COMM_H_
#define FLASHATTN_DISTRIBUTED_COMM_H_

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace flashattn::distributed {

using Clock = std::chrono::steady_clock;

inline double SecondsBetween(Clock::time_point begin, Clock::time_point end) {
  return std::chrono::duration<double>(end - begin).count();
}

// A duplicate of the caller's communicator with MPI_ERRORS_RETURN, made (collectively, within the timeout)
// for one call and freed after it: the call's messages never match the caller's, and MPI errors come back
// as codes that Check turns into Error. A timeout ≤ 0 is replaced by the default, so that the collective
// check can still report it on every rank.
class CallComm {
 public:
  CallComm(MPI_Comm comm, std::string_view call, double timeout_seconds);
  ~CallComm();
  CallComm(const CallComm&) = delete;
  CallComm& operator=(const CallComm&) = delete;

  MPI_Comm get() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& call() const { return call_; }
  double timeout_seconds() const { return timeout_seconds_; }

  // Throws Error naming the call and `what`, with MPI's error string, unless `code` is MPI_SUCCESS.
  void Check(int code, std::string_view what) const;
  // Throws the timeout Error for `what`. The communicator is then left to MPI as it is: operations on it
  // may never complete, and freeing it would wait for them.
  [[noreturn]] void FailTimeout(std::string_view what) const;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::string call_;
  double timeout_seconds_;
  mutable bool abandoned_ = false;
};

// Outstanding non-blocking operations on a CallComm, and the buffers they read or write. Messages larger
// than MPI's int count are split into pieces of at most 1 GiB, sent in order under one tag.
// If the object dies with operations still pending (a timeout, or an exception elsewhere), the receives
// are cancelled, the point-to-point requests freed (MPI forbids freeing a collective's) and the buffers
// kept alive until the process ends: MPI may still touch them.
class Transfers {
 public:
  explicit Transfers(const CallComm& comm) : comm_(&comm) {}
  ~Transfers();
  Transfers(const Transfers&) = delete;
  Transfers& operator=(const Transfers&) = delete;

  void Send(const void* data, std::int64_t bytes, int dest, int tag, std::shared_ptr<const void> buffer);
  void Receive(void* data, std::int64_t bytes, int source, int tag, std::shared_ptr<const void> buffer);
  // A request posted elsewhere (a non-blocking collective), with the buffers it uses.
  void Add(MPI_Request request, std::vector<std::shared_ptr<const void>> buffers);

  // Takes over `other`'s pending operations (and buffers), leaving it empty.
  void Absorb(Transfers& other);

  bool Empty() const { return requests_.empty(); }
  // Progresses the operations; true once all have completed (then the set is empty again).
  bool Test();
  // Waits until all have completed; throws Error naming `what` if that takes longer than the timeout.
  void Wait(std::string_view what);

 private:
  const CallComm* comm_;
  enum class Kind : std::uint8_t { kSend, kReceive, kCollective };
  void Post(MPI_Request request, Kind kind) {
    requests_.push_back(request);
    kinds_.push_back(kind);
  }

  std::vector<MPI_Request> requests_;
  std::vector<Kind> kinds_;
  std::vector<std::shared_ptr<const void>> buffers_;
};

// Waits for one non-blocking collective posted on `comm`, within the timeout.
void WaitCollective(const CallComm& comm, MPI_Request request, std::vector<std::shared_ptr<const void>> buffers,
                    std::string_view what);

}  // namespace flashattn::distributed

#endif  // FLASHATTN_DISTRIBUTED_COMM_H_
