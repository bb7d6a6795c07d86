#include "comm/watchdog.h"

#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace mt {
namespace comm {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kTag = 0;

// One message between watchdog threads (sent as bytes: both ends are this code on one machine
// type).
struct Beat {
  int32_t goodbye = 0;  // 1: the sender's last message.
  int32_t in_call = 0;
  int64_t calls = 0;
  double seconds_in_call = 0;
  char op[24] = {};
};

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// What this rank knows of one peer.
struct Peer {
  int rank = 0;
  Clock::time_point last_heard;
  Beat last;  // The latest heartbeat received.
  bool said_goodbye = false;
  bool sent_goodbye = false;
  MPI_Request send = MPI_REQUEST_NULL;  // At most one send outstanding.
  Beat out;                             // Its buffer.
};

}  // namespace

struct Watchdog::State {
  WatchdogOptions options;
  double heartbeat = 1;
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  CallMonitor* monitor = nullptr;
  std::vector<Peer> peers;  // Rank 0: every other rank; others: rank 0.
  std::thread thread;
  std::mutex mu;
  std::condition_variable wake;
  bool stopping = false;             // Guarded by mu.
  Clock::time_point stopping_since;  // Guarded by mu.
  bool stopped = false;              // Stop() has returned (main thread only).
  // Watchdog thread only: its previous loop, and until when checks are off after a freeze of
  // this process.
  Clock::time_point last_tick, frozen_until;

  void Loop();
  void Receive();
  void Send(bool goodbye);
  bool Done() const;
  // stop_started: when Stop() began (if stopping_now).
  void Check(bool stopping_now, Clock::time_point stop_started);
  void CheckSilence(Clock::time_point now);
  void CheckStuckCall();
  [[noreturn]] void Fail(const std::string& what);
};

void Watchdog::State::Fail(const std::string& what) {
  const std::string message =
      absl::StrFormat("[rank %d] watchdog: %s (%s %g s); aborting the job", rank, what,
                      options.timeout_name, options.timeout_seconds);
  if (options.on_failure) options.on_failure(message);
  std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  const int code = options.exit_code;
  const double grace = options.abort_grace_seconds;
  const int me = rank;
  std::thread([code, grace, me] {
    std::this_thread::sleep_for(std::chrono::duration<double>(grace));
    std::fprintf(stderr,
                 "[rank %d] watchdog: the abort was not delivered within %g s (the launcher is "
                 "unreachable); ending this process\n",
                 me, grace);
    std::fflush(stderr);
    std::_Exit(code);
  }).detach();
  if (options.abort) {
    options.abort(code);
  } else {
    MPI_Abort(MPI_COMM_WORLD, code);
  }
  std::_Exit(code);
}

void Watchdog::State::Receive() {
  for (;;) {
    int flag = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kTag, comm, &flag, &status) != MPI_SUCCESS || !flag) return;
    Beat beat;
    MPI_Recv(&beat, sizeof(beat), MPI_BYTE, status.MPI_SOURCE, kTag, comm, MPI_STATUS_IGNORE);
    for (Peer& p : peers) {
      if (p.rank != status.MPI_SOURCE) continue;
      p.last_heard = Clock::now();
      p.last = beat;
      if (beat.goodbye) p.said_goodbye = true;
    }
  }
}

// A heartbeat (or the goodbye) to every peer whose previous message has gone.
void Watchdog::State::Send(bool goodbye) {
  const CallMonitor::Snapshot s = monitor->Read();
  for (Peer& p : peers) {
    if (p.sent_goodbye) continue;
    int done = 1;
    if (p.send != MPI_REQUEST_NULL) MPI_Test(&p.send, &done, MPI_STATUS_IGNORE);
    if (!done) continue;  // The peer is not reading; do not queue more.
    p.out = Beat();
    p.out.goodbye = goodbye ? 1 : 0;
    p.out.in_call = s.in_call ? 1 : 0;
    p.out.calls = s.calls;
    p.out.seconds_in_call = s.seconds_in_call;
    std::snprintf(p.out.op, sizeof(p.out.op), "%s", s.op);
    MPI_Isend(&p.out, sizeof(p.out), MPI_BYTE, p.rank, kTag, comm, &p.send);
    p.sent_goodbye = goodbye;
  }
}

bool Watchdog::State::Done() const {
  for (const Peer& p : peers) {
    if (!p.sent_goodbye || !p.said_goodbye) return false;
  }
  return true;
}

void Watchdog::State::CheckSilence(Clock::time_point now) {
  // Rank 0 watches every rank; of the others, rank 1 reports rank 0 first, the rest a few
  // heartbeats later (only if rank 1 could not), so one line names the silent rank.
  const double grace = rank <= 1 ? 0 : 3 * heartbeat + 2;
  for (const Peer& p : peers) {
    if (p.said_goodbye) continue;
    const double silent = Seconds(now - p.last_heard);
    if (silent > options.timeout_seconds + grace) {
      Fail(
          absl::StrFormat("rank %d has sent no heartbeat for %.1f s (stopped, hung or unreachable)",
                          p.rank, silent));
    }
  }
}

// On rank 0: a call that has waited past the timeout names the ranks that are not in any call.
void Watchdog::State::CheckStuckCall() {
  struct Seen {
    int rank;
    bool in_call;
    double seconds;
    int64_t calls;
    std::string op;
  };
  const Clock::time_point now = Clock::now();
  const CallMonitor::Snapshot self = monitor->Read();
  std::vector<Seen> seen = {{0, self.in_call, self.seconds_in_call, self.calls, self.op}};
  for (const Peer& p : peers) {
    const double age = p.last.in_call ? Seconds(now - p.last_heard) : 0;
    seen.push_back({p.rank, p.last.in_call != 0, p.last.seconds_in_call + age, p.last.calls,
                    std::string(p.last.op, strnlen(p.last.op, sizeof(p.last.op)))});
  }
  // A silent peer explains the wait better than its stale state.
  std::vector<std::string> silent;
  for (const Peer& p : peers) {
    const double quiet = Seconds(now - p.last_heard);
    if (!p.said_goodbye && quiet > 2 * heartbeat + 1) {
      silent.push_back(absl::StrFormat("rank %d has sent no heartbeat for %.1f s", p.rank, quiet));
    }
  }
  const Seen* waiting = nullptr;
  for (const Seen& s : seen) {
    if (s.in_call && s.seconds > options.timeout_seconds &&
        (waiting == nullptr || s.seconds > waiting->seconds)) {
      waiting = &s;
    }
  }
  if (waiting == nullptr) return;
  if (!silent.empty()) {
    Fail(absl::StrFormat("rank %d has waited %.1f s in %s; %s (stopped, hung or unreachable)",
                         waiting->rank, waiting->seconds, waiting->op,
                         absl::StrJoin(silent, ", ")));
  }
  std::vector<std::string> outside, inside;
  for (const Seen& s : seen) {
    (s.in_call ? inside : outside)
        .push_back(absl::StrFormat("rank %d (%s, call %d%s)", s.rank,
                                   s.in_call ? s.op : "last " + s.op, s.calls,
                                   s.in_call ? absl::StrFormat(", %.0f s", s.seconds) : ""));
  }
  const std::string who =
      outside.empty()
          ? absl::StrCat("every rank is in a call, different ones? ", absl::StrJoin(inside, "; "))
          : absl::StrCat(
                "not in any communicator call (busy or stuck "
                "elsewhere): ",
                absl::StrJoin(outside, "; "));
  Fail(absl::StrFormat("rank %d has waited %.1f s in %s (call %d), which has not completed; %s",
                       waiting->rank, waiting->seconds, waiting->op, waiting->calls, who));
}

void Watchdog::State::Check(bool stopping_now, Clock::time_point stop_started) {
  const Clock::time_point now = Clock::now();
  CheckSilence(now);
  if (rank == 0 && !stopping_now) CheckStuckCall();
  if (stopping_now && Seconds(now - stop_started) > options.timeout_seconds) {
    std::vector<int> missing;
    for (const Peer& p : peers) {
      if (!p.said_goodbye) missing.push_back(p.rank);
    }
    Fail(absl::StrFormat("rank(s) %s did not finish within the timeout of this rank's end",
                         absl::StrJoin(missing, ", ")));
  }
}

void Watchdog::State::Loop() {
  for (;;) {
    bool stopping_now;
    Clock::time_point stop_started;
    {
      std::unique_lock<std::mutex> lock(mu);
      stopping_now = stopping;
      stop_started = stopping_since;
    }
    // A loop far later than planned means this process itself was frozen (SIGSTOP, then
    // SIGCONT): the peers' silence is not theirs, so their clocks restart.
    const Clock::time_point now = Clock::now();
    if (Seconds(now - last_tick) > std::max(3 * heartbeat, options.timeout_seconds / 2)) {
      for (Peer& p : peers) p.last_heard = now;
      frozen_until = now + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(options.timeout_seconds));
    }
    last_tick = now;
    Receive();
    Send(stopping_now);
    if (now >= frozen_until) Check(stopping_now, stop_started);
    if (stopping_now && Done()) break;
    std::unique_lock<std::mutex> lock(mu);
    // Once stopping, poll fast: peers' goodbyes end the exchange.
    wake.wait_for(lock, std::chrono::duration<double>(stopping ? 0.01 : heartbeat),
                  [&] { return stopping && !stopping_now; });
  }
  for (Peer& p : peers) {
    if (p.send != MPI_REQUEST_NULL) MPI_Wait(&p.send, MPI_STATUS_IGNORE);
  }
}

Watchdog::Watchdog() : state_(std::make_unique<State>()) {}

absl::StatusOr<std::unique_ptr<Watchdog>> Watchdog::Start(const WatchdogOptions& options) {
  if (!(options.timeout_seconds > 0) || !(options.heartbeat_seconds >= 0) ||
      !(options.abort_grace_seconds > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Watchdog::Start: ", options.timeout_name, " must be > 0 (got ", options.timeout_seconds,
        "), the heartbeat >= 0 (got ", options.heartbeat_seconds, ") and the abort grace > 0 (got ",
        options.abort_grace_seconds, ")"));
  }
  int initialized = 0, level = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Query_thread(&level);
  if (!initialized || level < MPI_THREAD_MULTIPLE) {
    return absl::FailedPreconditionError(
        "Watchdog::Start: needs MPI initialised with MPI_THREAD_MULTIPLE "
        "(MpiRuntime::Init(..., MpiThreads::kMultiple)); this MPI library may not offer it");
  }
  std::unique_ptr<Watchdog> w(new Watchdog());
  State& s = *w->state_;
  s.options = options;
  s.monitor = &w->monitor_;
  s.heartbeat = options.heartbeat_seconds > 0 ? options.heartbeat_seconds
                                              : std::min(1.0, options.timeout_seconds / 10);
  MPI_Comm_rank(MPI_COMM_WORLD, &s.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &s.size);
  if (s.size == 1) return w;
  if (MPI_Comm_dup(MPI_COMM_WORLD, &s.comm) != MPI_SUCCESS) {
    return absl::InternalError("Watchdog::Start: MPI_Comm_dup failed");
  }
  const Clock::time_point now = Clock::now();
  for (int r = 0; r < s.size; ++r) {
    if (r == s.rank || (s.rank != 0 && r != 0)) continue;
    Peer p;
    p.rank = r;
    p.last_heard = now;
    s.peers.push_back(p);
  }
  s.last_tick = now;
  s.frozen_until = now;
  s.thread = std::thread([&s] { s.Loop(); });
  return w;
}

void Watchdog::Stop() {
  State& s = *state_;
  if (s.stopped) return;
  s.stopped = true;
  if (!s.thread.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.stopping = true;
    s.stopping_since = Clock::now();
  }
  s.wake.notify_all();
  s.thread.join();
  MPI_Comm_free(&s.comm);
}

Watchdog::~Watchdog() { Stop(); }

}  // namespace comm
}  // namespace mt
