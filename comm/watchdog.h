// Watchdog: ends the whole MPI job when a rank stops making progress, naming the rank, instead of
// leaving the others blocked in a collective forever (a hung node, a SIGSTOPped process, a rank
// stuck outside the collective its peers wait in). The anchor is the watchdog of PyTorch's NCCL
// process groups (a collective not done within the timeout ends the job); this one works for the
// MPI backend on the CPU too, and names the culprit.
//
//   auto runtime = MpiRuntime::Init(&argc, &argv, MpiThreads::kMultiple);
//   auto world = (*runtime)->World();
//   WatchdogOptions o;
//   o.timeout_seconds = 600;
//   auto watchdog = Watchdog::Start(o);            // collective over MPI_COMM_WORLD
//   (*world)->set_call_monitor((*watchdog)->monitor());   // before Split(): sub-communicators
//   inherit
//   ... train ...
//   (*watchdog)->Stop();                           // collective, before the communicators go
//
// Design. Each rank runs one watchdog thread, which talks only to other ranks' watchdog threads,
// over its own duplicate of MPI_COMM_WORLD (so MPI must grant MPI_THREAD_MULTIPLE), with small
// non-blocking messages in a star: every rank sends a heartbeat to rank 0 every
// `heartbeat_seconds`, and rank 0 sends one to every rank. A heartbeat carries the sender's
// CallMonitor snapshot: how many communicator calls its main thread has entered, whether it is in
// one now and for how long. The thread never blocks in MPI (Iprobe/Recv of messages already
// there, Isend with at most one send outstanding per peer), so a silent peer cannot stall it.
//   - A process that is stopped or hung as a whole (SIGSTOP, a frozen node, a dead network) stops
//     sending: rank 0 notices a rank silent for longer than the timeout, and rank 1 notices rank
//     0's silence (the other ranks too, a few heartbeats later, as a fallback). The message names
//     the silent rank.
//   - A main thread that waits in one call longer than the timeout (its peers never joined the
//     collective) is seen by rank 0 in the heartbeats: it names the ranks that are not inside any
//     communicator call (they are busy or stuck elsewhere), or, if every rank is inside one (the
//     ranks called different collectives), every rank with its call.
//   - A process that dies is mpirun's to report: it notices the exit within seconds, kills the
//     others and names the rank ("mpirun noticed that process rank 1 ... exited on signal 9").
// On a failure the detecting rank's thread prints one line to stderr,
//   "[rank 0] watchdog: rank 1 has sent no heartbeat for 10.4 s (stopped, hung or unreachable)
//    (timeout 10 s); aborting the job",
// and calls MPI_Abort(MPI_COMM_WORLD, exit_code) (or options.on_failure, for tests): mpirun then
// kills every rank, stopped ones included (SIGKILL ends stopped processes), and exits non-zero.
// Where the abort cannot be delivered (this rank's node has lost its link to mpirun), the process
// ends itself after abort_grace_seconds; the launcher's side of a lost node is docs/multinode.md's.
// Stop() ends the thread cleanly: every rank sends a last "goodbye" message and waits for those of
// its peers (at most the timeout, else the ranks that never said goodbye are named), so no message
// is left unmatched when MPI is finalised.
//
// The timeout bounds the time one call may wait for slower ranks: phases in which one rank works
// alone while the others wait in a collective for longer than that (say, building the index of a
// huge dataset) need a larger timeout. Detection takes between the timeout and the timeout plus
// two heartbeats. A job of one rank starts no thread.
#ifndef MT_COMM_WATCHDOG_H_
#define MT_COMM_WATCHDOG_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"

namespace mt {
namespace comm {

struct WatchdogOptions {
  // Longest silence of a peer, and longest single communicator call, before the job is ended.
  // > 0.
  double timeout_seconds = 600;
  // Between heartbeats; 0: min(1, timeout / 10).
  double heartbeat_seconds = 0;
  // Named in the failure message after the timeout, e.g. "--distributed_timeout".
  std::string timeout_name = "timeout";
  // MPI_Abort's error code (mpirun's exit code): 75 is EX_TEMPFAIL, "try again" (resume from the
  // last checkpoint).
  int exit_code = 75;
  // Called on the watchdog thread with the failure message instead of printing it and aborting
  // (tests); must not return to keep the job's guarantees.
  std::function<void(const std::string& message)> on_failure;
  // After the failure line, MPI_Abort asks the launcher to end every rank. Behind a cut link that
  // request may never be delivered (the local daemon cannot reach mpirun) and MPI_Abort may not
  // return: this process then ends itself (exit_code) after abort_grace_seconds, saying so in
  // one more line. > 0.
  double abort_grace_seconds = 5;
  // What asks the launcher to end the job; default MPI_Abort(MPI_COMM_WORLD, exit_code). A test
  // passes one that never returns, as an undeliverable abort does.
  std::function<void(int exit_code)> abort;
};

class Watchdog {
 public:
  // Starts this rank's watchdog thread. Collective over MPI_COMM_WORLD (MPI initialised).
  // InvalidArgument for a timeout <= 0 or a negative heartbeat; FailedPrecondition when MPI was
  // not initialised with MPI_THREAD_MULTIPLE (MpiRuntime::Init(..., MpiThreads::kMultiple));
  // Internal for MPI failures.
  static absl::StatusOr<std::unique_ptr<Watchdog>> Start(const WatchdogOptions& options);

  // Ends the thread after the goodbye exchange (see above). Collective over MPI_COMM_WORLD; call
  // it before destroying the communicators the monitor watches. Idempotent.
  void Stop();
  // Stop()s if still running.
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // What the communicators of this process record their calls in (set_call_monitor).
  CallMonitor* monitor() { return &monitor_; }

 private:
  struct State;
  Watchdog();
  CallMonitor monitor_;
  std::unique_ptr<State> state_;
};

}  // namespace comm
}  // namespace mt

#endif  // MT_COMM_WATCHDOG_H_
