// The main() of every eval binary, in two forms over one start-up (logging, flags derived from the
// config's field table by core/config_flags.h, MPI, the world):
//   - EvalMain, for the binaries that load a checkpoint and then run (//jobs/serve:generate,
//     //jobs/serve:serve);
//   - HarnessMain (harness_main.h), for the scoring harnesses' stages.
//
//   int main(int argc, char** argv) {
//     GenerateMainConfig config;                               // The defaults.
//     const ConfigFlags<GenerateMainConfig> flags(config);     // Before parsing.
//     return EvalMain(argc, argv, {"generate", "Text generation ..."},
//         ApplyFlagsAndValidate(flags, &config),
//         [&](comm::Communicator& world, int local_rank, int local_size) {
//           return Run(config, world, local_rank, local_size); });
//   }
//
// Bad flags (the same on every rank) print "<name>: error: <message>" on rank 0 and every rank
// returns 1 before any collective; an error of the run ends every rank through
// MpiRuntime::Abort.
#ifndef MT_EVAL_EVAL_MAIN_H_
#define MT_EVAL_EVAL_MAIN_H_

#include <functional>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#include "core/config_flags.h"
#include "core/status.h"

namespace mt {
namespace eval {

struct MainInfo {
  const char* name;   // "wikitext103": the binary, and the prefix of its error lines.
  const char* usage;  // gflags' usage message.
};

// "<name>: error: <message>" on one line of stderr (newlines in the message become spaces).
void PrintError(const MainInfo& info, const absl::Status& status);

// The `apply_flags` of every eval binary: the flags given on the command line into *config, then
// config->Validate(). `flags` and `config` must outlive the returned function.
template <typename Config>
std::function<absl::Status()> ApplyFlagsAndValidate(const ConfigFlags<Config>& flags,
                                                    Config* config) {
  return [&flags, config]() -> absl::Status {
    RETURN_IF_ERROR(flags.ApplyGiven(config));
    return config->Validate();
  };
}

// MPI and the communicator over every rank, once flags are applied.
struct EvalProcess {
  std::unique_ptr<comm::MpiRuntime> runtime;
  std::unique_ptr<comm::Communicator> world;  // Destroyed before the runtime.
};

// Logging (to stderr), gflags, MPI and the world; then `apply_flags` (which also validates the
// config: InvalidArgument naming the flag), refusing any positional argument. On an error prints
// it (a flag error on rank 0 only) and returns nullopt: main then returns 1.
std::optional<EvalProcess> StartProcess(int argc, char** argv, const MainInfo& info,
                                        const std::function<absl::Status()>& apply_flags);

using EvalRun =
    std::function<absl::Status(comm::Communicator& world, int local_rank, int local_size)>;

// StartProcess, then `run` on every rank; returns main's exit code.
int EvalMain(int argc, char** argv, const MainInfo& info,
             const std::function<absl::Status()>& apply_flags, const EvalRun& run);

}  // namespace eval
}  // namespace mt

#endif  // MT_EVAL_EVAL_MAIN_H_
