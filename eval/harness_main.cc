#include "eval/harness_main.h"

#include <cstdio>
#include <string>

#include "absl/strings/str_replace.h"
#include "comm/mpi_communicator.h"
#include "core/status.h"
#include "gflags/gflags.h"
#include "glog/logging.h"

namespace mt {
namespace eval {

namespace {

// "<name>: error: <message>" on one line.
void PrintError(const HarnessInfo& info, const absl::Status& status) {
  const std::string line = absl::StrReplaceAll(status.message(), {{"\n", " "}});
  std::fprintf(stderr, "%s: error: %s\n", info.name, line.c_str());
}

// Stages 1-3 of harness.h on this rank: no communication.
absl::StatusOr<std::unique_ptr<Harness>> OpenLocally(const HarnessConfig& config,
                                                     const Placement& placement, EvalTask& task) {
  ASSIGN_OR_RETURN(std::unique_ptr<Harness> harness, Harness::Open(config, placement));
  RETURN_IF_ERROR(task.Prepare(harness->checkpoint(), harness->rank0()));
  RETURN_IF_ERROR(harness->LoadModel(task.LoadOptions()));
  RETURN_IF_ERROR(task.Loaded(*harness));
  return harness;
}

// Rank 0's output: the results file and the results object as the last stdout line.
int Finish(const HarnessInfo& info, const HarnessConfig& config, const Json& results) {
  if (!config.results_json.empty()) {
    if (absl::Status s = WriteResultsJson(config.results_json, results); !s.ok()) {
      PrintError(info, s);
      return 1;
    }
  }
  std::printf("%s\n", results.dump().c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace

int HarnessMain(int argc, char** argv, const HarnessInfo& info, const HarnessConfig* config,
                const std::function<absl::Status()>& apply_flags,
                const std::function<std::unique_ptr<EvalTask>()>& make_task) {
  gflags::SetUsageMessage(info.usage);
  FLAGS_minloglevel = 1;
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  auto runtime = comm::MpiRuntime::Init(&argc, &argv);
  if (!runtime.ok()) {
    PrintError(info, runtime.status());
    return 1;
  }
  auto world = (*runtime)->World();
  if (!world.ok()) comm::MpiRuntime::Abort(world.status());
  const Placement placement{(*world)->rank(), (*world)->size(), (*runtime)->local_rank(),
                            (*runtime)->local_size()};
  // Flags are the same on every rank, so every rank fails alike here.
  absl::Status flags =
      argc > 1 ? absl::InvalidArgumentError(std::string("unexpected argument '") + argv[1] + "'")
               : apply_flags();
  if (!flags.ok()) {
    if (placement.rank == 0) PrintError(info, flags);
    return 1;
  }
  std::unique_ptr<EvalTask> task = make_task();
  auto harness = OpenLocally(*config, placement, *task);
  bool report = false;
  absl::Status agreed = AgreeOnStatus(**world, harness.status(), &report);
  if (!agreed.ok()) {
    if (report) PrintError(info, agreed);
    return 1;
  }
  if (absl::Status s = (*harness)->Connect(**world); !s.ok()) comm::MpiRuntime::Abort(s);
  if (placement.rank == 0) {
    std::printf("%s: %s\n", info.name, (*harness)->Describe().c_str());
    std::fflush(stdout);
  }
  absl::StatusOr<Json> results = task->Run(**harness);
  if (!results.ok()) comm::MpiRuntime::Abort(results.status());
  return placement.rank == 0 ? Finish(info, *config, *results) : 0;
}

}  // namespace eval
}  // namespace mt
