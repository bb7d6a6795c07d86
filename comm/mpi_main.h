// The main() of every MPI program (the pretraining, evaluation and generation jobs, and the
// benchmarks that run over ranks): one start-up and one exit convention.
//
//   int main(int argc, char** argv) {
//     GenerateConfig config;                               // The defaults.
//     const ConfigFlags<GenerateConfig> flags(config);     // Before parsing.
//     return comm::MpiMain(argc, argv, {"generate", "Text generation ..."},
//         [&](int world_size) -> absl::Status {
//           RETURN_IF_ERROR(flags.ApplyGiven(&config));
//           return config.Validate();
//         },
//         [&](const comm::MpiProcess& p) -> absl::StatusOr<int> {
//           RETURN_IF_ERROR(Run(config, p));
//           return 0;                                        // main's exit code
//         });
//   }
//
// In order: the usage message, logging to stderr (library INFO lines only with --minloglevel=0),
// the flags, MPI (with the threads the watchdog needs) and the world communicator; then
// `apply_flags` (which also validates them), refusing positional arguments. Flags are the same on
// every rank, so every rank fails alike there: rank 0 alone prints "<name>: error: <message>"
// (one line) and every rank returns 1, before any collective. Then the watchdog
// (--distributed_timeout, defined here for every MPI program: comm/watchdog.h) and, when asked,
// the stop signals; then `run` on every rank, whose value is main's exit code (a run that has
// reported an error every rank agrees on returns 1 itself). An error status from `run` ends
// every rank through MpiRuntime::Abort ("fatal: <status>", one line; a rank alone cannot exit
// without hanging the others).
#ifndef MT_COMM_MPI_MAIN_H_
#define MT_COMM_MPI_MAIN_H_

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"

namespace mt {
namespace comm {

struct MainInfo {
  const char* name;   // The binary: "<name>: error: ..." lines.
  const char* usage;  // gflags' usage message.
};

// "<name>: error: <message>" as one line on stderr (newlines in the message become spaces).
void PrintMainError(const MainInfo& info, const absl::Status& status);

// What `run` gets.
struct MpiProcess {
  Communicator& world;
  int local_rank = 0;  // Among the ranks on this host (its GPU: local_rank mod GPUs).
  int local_size = 1;
  std::string host_name;  // This process's host (MPI's processor name).
  // Set by one of MpiMainOptions::stop_signals (null when there are none): the job stops cleanly
  // at its next point of agreement (the pretraining job saves and exits 0).
  const std::atomic<bool>* stop = nullptr;
};

struct MpiMainOptions {
  // Signals that request a clean stop instead of ending the process (e.g. SIGTERM, a scheduler's
  // preemption). Only for programs whose `run` reads MpiProcess::stop.
  std::vector<int> stop_signals;
  // Rewrites the arguments before gflags reads them (the pretraining drivers join Megatron's
  // `--data_path 0.3 A 0.7 B` into one value).
  std::function<void(int* argc, char** argv)> rewrite_args;
};

int MpiMain(int argc, char** argv, const MainInfo& info,
            const std::function<absl::Status(int world_size)>& apply_flags,
            const std::function<absl::StatusOr<int>(const MpiProcess&)>& run,
            const MpiMainOptions& options = {});

}  // namespace comm
}  // namespace mt

#endif  // MT_COMM_MPI_MAIN_H_
