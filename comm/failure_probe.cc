// A job in which rank 1 fails while the other ranks wait in an all-reduce, for failure_test.sh:
//
//   mpirun -np N failure_probe --mode=kill|exit|status|none
//
//   kill    rank 1 raises SIGKILL (a crash, an OOM kill);
//   exit    rank 1 calls exit(3) without finalising MPI (a library that gave up);
//   status  rank 1 gets an error Status from a collective (a non-contiguous view) and takes the
//           binaries' clean abort path, MpiRuntime::Abort;
//   none    control: every rank completes the all-reduce and the job exits 0;
// and, with --watchdog=SECONDS (comm/watchdog.h, which must end the job naming the rank):
//   stop    rank --victim (default 1) raises SIGSTOP (a hung process);
//   stuck   rank --victim sleeps (alive, heartbeating) outside any call for 4 x the timeout;
// and, with --watchdog and --abort_never_returns (an abort that cannot reach the launcher, as
// behind a cut link: the watchdog's MPI_Abort replaced by a wait that never ends), every
// detecting rank must end itself after the 2 s abort grace.
//
// Every rank first completes one all-reduce (so the job is up), then ranks != victim enter a
// second one (4 MiB) that the victim never joins unless --mode=none. A survivor that returns from
// it prints "UNEXPECTED". With --watchdog the job ends with Watchdog::Stop (a clean goodbye).
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#include "comm/watchdog.h"
#include "core/tensor.h"

namespace {

using mt::comm::Communicator;
using mt::comm::MpiRuntime;
using mt::comm::ReduceOp;

void Check(const absl::Status& s) {
  if (!s.ok()) MpiRuntime::Abort(s);
}

int Run(const std::string& mode, int victim, double watchdog_seconds, Communicator& world) {
  const int rank = world.rank();
  float one = 1;
  Check(world.AllReduce(mt::TensorView(&one, mt::Shape{1}, mt::DType::kF32), ReduceOp::kSum));
  std::printf("rank %d: ready (%g ranks)\n", rank, one);
  std::fflush(stdout);
  std::vector<float> data(1 << 20, 1.0f);
  mt::TensorView t(data.data(), mt::Shape{static_cast<int64_t>(data.size())}, mt::DType::kF32);
  if (rank == victim && mode != "none") {
    // Let the others block in the all-reduce first.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::printf("rank %d: failing (--mode=%s)\n", rank, mode.c_str());
    std::fflush(stdout);
    if (mode == "kill") std::raise(SIGKILL);
    if (mode == "stop") std::raise(SIGSTOP);
    if (mode == "stuck") {
      std::this_thread::sleep_for(std::chrono::duration<double>(4 * watchdog_seconds));
      std::printf("UNEXPECTED: rank %d slept %g s without the watchdog ending the job\n", rank,
                  4 * watchdog_seconds);
      return 4;
    }
    if (mode == "exit") std::exit(3);
    if (mode == "status") {
      mt::TensorView strided = t.Slice(0, 6);
      strided.shape = {2, 3};
      strided.strides = {1, 2};
      Check(world.AllReduce(strided, ReduceOp::kSum));  // InvalidArgument -> Abort.
    }
    std::fprintf(stderr, "unknown --mode=%s\n", mode.c_str());
    return 2;
  }
  Check(world.AllReduce(t, ReduceOp::kSum));
  if (mode != "none") {
    std::printf("UNEXPECTED: rank %d finished the all-reduce without rank %d\n", rank, victim);
  } else {
    std::printf("rank %d: all-reduce done (%g)\n", rank, data[0]);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = "none";
  int victim = 1;
  double watchdog_seconds = 0;
  bool abort_never_returns = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--mode=", 7) == 0) mode = argv[i] + 7;
    if (std::strncmp(argv[i], "--victim=", 9) == 0) victim = std::atoi(argv[i] + 9);
    if (std::strncmp(argv[i], "--watchdog=", 11) == 0) watchdog_seconds = std::atof(argv[i] + 11);
    if (std::strcmp(argv[i], "--abort_never_returns") == 0) abort_never_returns = true;
  }
  auto runtime = MpiRuntime::Init(
      &argc, &argv,
      watchdog_seconds > 0 ? mt::comm::MpiThreads::kMultiple : mt::comm::MpiThreads::kSerialized);
  if (!runtime.ok()) MpiRuntime::Abort(runtime.status());
  int rc = 0;
  {
    auto world = (*runtime)->World();
    if (!world.ok()) MpiRuntime::Abort(world.status());
    std::unique_ptr<mt::comm::Watchdog> watchdog;
    if (watchdog_seconds > 0) {
      mt::comm::WatchdogOptions options;
      options.timeout_seconds = watchdog_seconds;
      options.timeout_name = "--watchdog";
      if (abort_never_returns) {
        options.abort_grace_seconds = 2;
        options.abort = [](int) {
          for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
        };
      }
      auto started = mt::comm::Watchdog::Start(options);
      if (!started.ok()) MpiRuntime::Abort(started.status());
      watchdog = std::move(*started);
      (*world)->set_call_monitor(watchdog->monitor());
    }
    rc = Run(mode, victim, watchdog_seconds, **world);
    if (watchdog != nullptr) watchdog->Stop();
  }
  return rc;
}
