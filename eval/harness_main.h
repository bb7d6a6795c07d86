// The main() of a scoring harness: every MPI program's start-up (comm/mpi_main.h: logging, the
// flags from the task config's field table, applied by the caller's callback, MPI), the stages of
// harness.h, and the output: progress on stdout, the results object as the LAST stdout line (and
// in --results_json).
// Input errors (flags, checkpoint, data files) print one line
// "<name>: error: <message>" on rank 0 (or on the rank that failed alone) and every rank exits
// 1, before any collective; failures after that end the job through MpiRuntime::Abort.
//
//   int main(int argc, char** argv) {
//     WikiText103Config config;                               // The defaults.
//     const ConfigFlags<WikiText103Config> flags(config);     // Before parsing.
//     return HarnessMain(
//         argc, argv, {"wikitext103", "usage"}, &config.harness,
//         [&] { return flags.ApplyGivenAndValidate(&config); },
//         [&] { return std::make_unique<WikiText103Task>(config); });
//   }
#ifndef MT_EVAL_HARNESS_MAIN_H_
#define MT_EVAL_HARNESS_MAIN_H_

#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "comm/mpi_main.h"
#include "eval/harness.h"

namespace mt {
namespace eval {

// Runs an evaluation binary; returns main's exit code. `config` is the harness part of the
// task's config, filled by `apply_flags` (which also validates the whole config: InvalidArgument
// naming the flag); `make_task` builds the task from the resolved config.
int HarnessMain(int argc, char** argv, const comm::MainInfo& info, const HarnessConfig* config,
                const std::function<absl::Status()>& apply_flags,
                const std::function<std::unique_ptr<EvalTask>()>& make_task);

}  // namespace eval
}  // namespace mt

#endif  // MT_EVAL_HARNESS_MAIN_H_
