// The main() of the eval binaries that load a checkpoint on every rank (//eval:generate,
// //eval:serve): logging, flags derived from the config's field table
// (core/config_flags.h), MPI, validation, then the run.
//
//   int main(int argc, char** argv) {
//     return mt::eval::EvalMain<GenerateMainConfig>(argc, argv, "generate", "Text generation ...",
//         [](const GenerateMainConfig& c, mt::comm::Communicator& world, int local_rank,
//            int local_size) { return Run(c, world, local_rank, local_size); });
//   }
//
// Config: a struct with a Fields table and `absl::Status Validate() const`. Bad flags (the same
// on every rank) print "<name>: error: ..." on rank 0 and return 1 on every rank before any
// collective; an error of the run ends every rank through MpiRuntime::Abort.
#ifndef MT_EVAL_EVAL_MAIN_H_
#define MT_EVAL_EVAL_MAIN_H_

#include <cstdio>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#include "core/config_flags.h"
#include "gflags/gflags.h"
#include "glog/logging.h"

namespace mt {
namespace eval {

template <typename Config>
using EvalRun = std::function<absl::Status(const Config& config, comm::Communicator& world,
                                           int local_rank, int local_size)>;

template <typename Config>
int EvalMain(int argc, char** argv, const char* name, const char* usage,
             const EvalRun<Config>& run) {
  Config config;
  const ConfigFlags<Config> flags(config);
  gflags::SetUsageMessage(usage);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  auto runtime = comm::MpiRuntime::Init(&argc, &argv);
  if (!runtime.ok()) comm::MpiRuntime::Abort(runtime.status());
  auto world = (*runtime)->World();
  if (!world.ok()) comm::MpiRuntime::Abort(world.status());
  absl::Status valid = flags.ApplyGiven(&config);
  if (valid.ok()) valid = config.Validate();
  if (!valid.ok()) {
    if ((*world)->rank() == 0) {
      std::fprintf(stderr, "%s: error: %s\n", name, std::string(valid.message()).c_str());
    }
    return 1;
  }
  const absl::Status s = run(config, **world, (*runtime)->local_rank(), (*runtime)->local_size());
  if (!s.ok()) comm::MpiRuntime::Abort(s);
  return 0;
}

}  // namespace eval
}  // namespace mt

#endif  // MT_EVAL_EVAL_MAIN_H_
