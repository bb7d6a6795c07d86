#include "comm/mpi_main.h"

#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_progress.h"
#include "comm/watchdog.h"
#include "gflags/gflags.h"
#include "glog/logging.h"

DEFINE_double(distributed_timeout, 600,
              "Seconds a rank may be silent (stopped, hung) or one communicator call may wait "
              "before the whole job is ended with a message naming the rank (0: off; "
              "comm/watchdog.h).");
DEFINE_bool(mpi_async_progress, false,
            "A thread drives MPI's progress while non-blocking all-reduces are in flight, so "
            "gradient buckets move while backward computes (comm/mpi_progress.h).");

namespace mt {
namespace comm {
namespace {

constexpr double kProgressInterval = 50e-6;  // Seconds between the progress thread's polls.

// Set by the stop signals; read by the job between its steps.
std::atomic<bool> stop_requested{false};
void OnStopSignal(int) { stop_requested.store(true); }

// The watchdog on `world` (collective over MPI_COMM_WORLD; aborts the job if it cannot start),
// or null with --distributed_timeout=0.
std::unique_ptr<Watchdog> StartWatchdog(Communicator& world) {
  if (!(FLAGS_distributed_timeout > 0)) return nullptr;
  WatchdogOptions wo;
  wo.timeout_seconds = FLAGS_distributed_timeout;
  wo.timeout_name = "--distributed_timeout";
  auto started = Watchdog::Start(wo);
  if (!started.ok()) MpiRuntime::Abort(started.status());
  world.set_call_monitor((*started)->monitor());
  return std::move(*started);
}

}  // namespace

void PrintMainError(const MainInfo& info, const absl::Status& status) {
  const std::string line = absl::StrReplaceAll(status.message(), {{"\n", " "}});
  std::fprintf(stderr, "%s: error: %s\n", info.name, line.c_str());
}

int MpiMain(int argc, char** argv, const MainInfo& info,
            const std::function<absl::Status(int world_size)>& apply_flags,
            const std::function<absl::StatusOr<int>(const MpiProcess&)>& run,
            const MpiMainOptions& options) {
  gflags::SetUsageMessage(info.usage);
  FLAGS_minloglevel = 1;  // Library INFO logs (dataset index caching) only with --minloglevel=0.
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  if (options.rewrite_args) options.rewrite_args(&argc, argv);
  gflags::ParseCommandLineFlags(&argc, &argv, /*remove_flags=*/true);
  // The watchdog's thread and the progress thread call MPI beside the main thread.
  const MpiThreads threads = FLAGS_distributed_timeout > 0 || FLAGS_mpi_async_progress
                                 ? MpiThreads::kMultiple
                                 : MpiThreads::kSerialized;
  auto runtime = MpiRuntime::Init(&argc, &argv, threads);
  if (!runtime.ok()) {
    PrintMainError(info, runtime.status());
    return 1;
  }
  auto world = (*runtime)->World();
  if (!world.ok()) MpiRuntime::Abort(world.status());
  absl::Status valid =
      argc > 1 ? absl::InvalidArgumentError(absl::StrCat("unexpected argument '", argv[1], "'"))
               : apply_flags((*world)->size());
  if (valid.ok() && FLAGS_distributed_timeout < 0) {
    valid =
        absl::InvalidArgumentError(absl::StrCat("--distributed_timeout=", FLAGS_distributed_timeout,
                                                " must be >= 0 seconds (0: no watchdog)"));
  }
  if (valid.ok() && FLAGS_mpi_async_progress) valid = MpiProgress::Start(kProgressInterval);
  if (!valid.ok()) {
    if ((*world)->rank() == 0) PrintMainError(info, valid);
    return 1;
  }
  std::unique_ptr<Watchdog> watchdog = StartWatchdog(**world);
  for (int signal : options.stop_signals) std::signal(signal, OnStopSignal);
  const MpiProcess process{**world, (*runtime)->local_rank(), (*runtime)->local_size(),
                           (*runtime)->host_name(),
                           options.stop_signals.empty() ? nullptr : &stop_requested};
  const absl::StatusOr<int> exit_code = run(process);
  if (!exit_code.ok()) MpiRuntime::Abort(exit_code.status());  // One line, on every rank.
  if (watchdog != nullptr) watchdog->Stop();
  return *exit_code;
}

}  // namespace comm
}  // namespace mt
