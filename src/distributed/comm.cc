#include "distributed/comm.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "distributed/layout.h"
#include "flashattn/distributed.h"

namespace flashattn::distributed {
namespace {

constexpr std::int64_t kMaxMessageBytes = std::int64_t{1} << 30;

std::string ErrorString(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(length));
}

// Buffers of abandoned operations: MPI may still touch them, so they live as long as the process.
void KeepForever(std::vector<std::shared_ptr<const void>> buffers) {
  static std::mutex mutex;
  static auto* abandoned = new std::vector<std::shared_ptr<const void>>;
  const std::lock_guard<std::mutex> lock(mutex);
  abandoned->insert(abandoned->end(), std::make_move_iterator(buffers.begin()), std::make_move_iterator(buffers.end()));
}

// Repeats `done()` until it returns true or `timeout_seconds` pass. Polls continuously, yielding the core
// between polls (as Open MPI's own waits do when ranks outnumber cores), for the first 50 ms: a wait that
// ends within that costs no latency. Longer waits (a slow or vanished rank) sleep between polls, from
// 50 µs growing to 1 ms.
template <typename Done>
bool PollUntil(double timeout_seconds, Done done) {
  constexpr double kSpinSeconds = 0.05;
  const Clock::time_point start = Clock::now();
  auto pause = std::chrono::microseconds(50);
  while (!done()) {
    const double waited = SecondsBetween(start, Clock::now());
    if (waited > timeout_seconds) return false;
    if (waited < kSpinSeconds) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
  }
  return true;
}

}  // namespace

CallComm::CallComm(MPI_Comm comm, std::string_view call, double timeout_seconds)
    : call_(call), timeout_seconds_(timeout_seconds > 0 ? timeout_seconds : kDefaultTimeoutSeconds) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) Fail(call, ": MPI is not initialized (or already finalized)");
  if (comm == MPI_COMM_NULL) Fail(call, ": comm is MPI_COMM_NULL");
  // MPI writes the new handle when the duplication completes, which may be after a timeout: the handle
  // lives on the heap, and is left there if the other ranks never come.
  auto duplicate = std::make_unique<MPI_Comm>(MPI_COMM_NULL);
  MPI_Request request;
  Check(MPI_Comm_idup(comm, duplicate.get(), &request), "duplicating the communicator");
  int code = MPI_SUCCESS;
  if (!PollUntil(timeout_seconds_, [&] {
        int done = 0;
        code = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
        return code != MPI_SUCCESS || done;
      })) {
    static_cast<void>(duplicate.release());  // left to MPI, see above
    FailTimeout("the other ranks to enter the call");
  }
  Check(code, "duplicating the communicator");
  comm_ = *duplicate;
  Check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "setting MPI_ERRORS_RETURN");
  Check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  Check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
}

CallComm::~CallComm() {
  if (comm_ != MPI_COMM_NULL && !abandoned_) MPI_Comm_free(&comm_);
}

void CallComm::FailTimeout(std::string_view what) const {
  abandoned_ = true;
  Fail(call_, ": rank ", rank_, " waited more than timeout_seconds=", timeout_seconds_, " s for ", what,
       ": another rank left the call or stopped responding");
}

void CallComm::Check(int code, std::string_view what) const {
  if (code != MPI_SUCCESS) Fail(call_, ": rank ", rank_, ": ", what, " failed: ", ErrorString(code));
}

Transfers::~Transfers() {
  if (requests_.empty()) return;
  for (std::size_t n = 0; n < requests_.size(); ++n) {
    if (requests_[n] == MPI_REQUEST_NULL || kinds_[n] == Kind::kCollective) continue;
    if (kinds_[n] == Kind::kReceive) MPI_Cancel(&requests_[n]);
    MPI_Request_free(&requests_[n]);
  }
  KeepForever(std::move(buffers_));
}

void Transfers::Send(const void* data, std::int64_t bytes, int dest, int tag, std::shared_ptr<const void> buffer) {
  const auto* bytes_in = static_cast<const char*>(data);
  for (std::int64_t offset = 0; offset < bytes; offset += kMaxMessageBytes) {
    const int count = static_cast<int>(std::min(kMaxMessageBytes, bytes - offset));
    MPI_Request request;
    comm_->Check(MPI_Isend(bytes_in + offset, count, MPI_BYTE, dest, tag, comm_->get(), &request), "MPI_Isend");
    Post(request, Kind::kSend);
  }
  buffers_.push_back(std::move(buffer));
}

void Transfers::Receive(void* data, std::int64_t bytes, int source, int tag, std::shared_ptr<const void> buffer) {
  auto* bytes_out = static_cast<char*>(data);
  for (std::int64_t offset = 0; offset < bytes; offset += kMaxMessageBytes) {
    const int count = static_cast<int>(std::min(kMaxMessageBytes, bytes - offset));
    MPI_Request request;
    comm_->Check(MPI_Irecv(bytes_out + offset, count, MPI_BYTE, source, tag, comm_->get(), &request), "MPI_Irecv");
    Post(request, Kind::kReceive);
  }
  buffers_.push_back(std::move(buffer));
}

void Transfers::Add(MPI_Request request, std::vector<std::shared_ptr<const void>> buffers) {
  Post(request, Kind::kCollective);
  buffers_.insert(buffers_.end(), std::make_move_iterator(buffers.begin()), std::make_move_iterator(buffers.end()));
}

void Transfers::Absorb(Transfers& other) {
  requests_.insert(requests_.end(), other.requests_.begin(), other.requests_.end());
  kinds_.insert(kinds_.end(), other.kinds_.begin(), other.kinds_.end());
  buffers_.insert(buffers_.end(), std::make_move_iterator(other.buffers_.begin()),
                  std::make_move_iterator(other.buffers_.end()));
  other.requests_.clear();
  other.kinds_.clear();
  other.buffers_.clear();
}

bool Transfers::Test() {
  if (requests_.empty()) return true;
  int done = 0;
  comm_->Check(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE),
               "MPI_Testall");
  if (!done) return false;
  requests_.clear();
  kinds_.clear();
  buffers_.clear();
  return true;
}

void Transfers::Wait(std::string_view what) {
  if (!PollUntil(comm_->timeout_seconds(), [&] { return Test(); })) comm_->FailTimeout(what);
}

void WaitCollective(const CallComm& comm, MPI_Request request, std::vector<std::shared_ptr<const void>> buffers,
                    std::string_view what) {
  Transfers transfers(comm);
  transfers.Add(request, std::move(buffers));
  transfers.Wait(what);
}

}  // namespace flashattn::distributed
