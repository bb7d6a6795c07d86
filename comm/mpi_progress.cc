#include "comm/mpi_progress.h"

#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"

namespace mt {
namespace comm {
namespace {

struct State {
  std::mutex mu;
  std::condition_variable wake;
  int in_flight = 0;      // Guarded by mu.
  bool stopping = false;  // Guarded by mu.
  bool running = false;   // Guarded by mu.
  std::thread thread;
  MPI_Comm comm = MPI_COMM_NULL;  // The thread's own, so its probes match nothing of the job's.
  std::chrono::duration<double> interval{50e-6};

  void Loop() {
    std::unique_lock<std::mutex> lock(mu);
    while (!stopping) {
      wake.wait(lock, [&] { return stopping || in_flight > 0; });
      while (!stopping && in_flight > 0) {
        lock.unlock();
        int flag = 0;
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &flag, MPI_STATUS_IGNORE);
        std::this_thread::sleep_for(interval);
        lock.lock();
      }
    }
  }
};

State& Get() {
  static State* s = new State();  // Never destroyed: the thread is joined by Stop().
  return *s;
}

}  // namespace

absl::Status MpiProgress::Start(double interval_seconds) {
  if (!(interval_seconds > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("MpiProgress: the interval must be > 0 s, not ", interval_seconds));
  }
  int initialized = 0, level = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Query_thread(&level);
  if (!initialized || level < MPI_THREAD_MULTIPLE) {
    return absl::FailedPreconditionError(
        "MpiProgress: needs MPI initialised with MPI_THREAD_MULTIPLE (the watchdog's "
        "--distributed_timeout > 0 asks for it)");
  }
  State& s = Get();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.running) return absl::OkStatus();
  if (MPI_Comm_dup(MPI_COMM_SELF, &s.comm) != MPI_SUCCESS) {
    return absl::InternalError("MpiProgress: MPI_Comm_dup(MPI_COMM_SELF) failed");
  }
  s.interval = std::chrono::duration<double>(interval_seconds);
  s.stopping = false;
  s.running = true;
  s.thread = std::thread([&s] { s.Loop(); });
  return absl::OkStatus();
}

void MpiProgress::Stop() {
  State& s = Get();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.running) return;
    s.stopping = true;
  }
  s.wake.notify_all();
  s.thread.join();
  std::lock_guard<std::mutex> lock(s.mu);
  s.running = false;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&s.comm);
}

void MpiProgress::Begin() {
  State& s = Get();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.running) return;
    ++s.in_flight;
  }
  s.wake.notify_one();
}

void MpiProgress::End() {
  State& s = Get();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.running && s.in_flight > 0) --s.in_flight;
}

bool MpiProgress::running() {
  State& s = Get();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.running;
}

}  // namespace comm
}  // namespace mt
