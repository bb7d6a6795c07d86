#include "eval/harness_main.h"

#include <cstdio>

#include "core/status.h"
#include "glog/logging.h"

namespace mt {
namespace eval {

namespace {

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
int Finish(const comm::MainInfo& info, const HarnessConfig& config, const Json& results) {
  if (!config.results_json.empty()) {
    if (absl::Status s = WriteResultsJson(config.results_json, results); !s.ok()) {
      comm::PrintMainError(info, s);
      return 1;
    }
  }
  std::printf("%s\n", results.dump().c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace

int HarnessMain(int argc, char** argv, const comm::MainInfo& info, const HarnessConfig* config,
                const std::function<absl::Status()>& apply_flags,
                const std::function<std::unique_ptr<EvalTask>()>& make_task) {
  return comm::MpiMain(
      argc, argv, info, [&](int) { return apply_flags(); },
      [&](const comm::MpiProcess& p) -> absl::StatusOr<int> {
        comm::Communicator& world = p.world;
        const Placement placement{world.rank(), world.size(), p.local_rank, p.local_size};
        std::unique_ptr<EvalTask> task = make_task();
        auto harness = OpenLocally(*config, placement, *task);
        bool report = false;
        absl::Status agreed = AgreeOnStatus(world, harness.status(), &report);
        if (!agreed.ok()) {
          if (report) comm::PrintMainError(info, agreed);
          return 1;
        }
        RETURN_IF_ERROR((*harness)->Connect(world));
        if (placement.rank == 0) {
          std::printf("%s: %s\n", info.name, (*harness)->Describe().c_str());
          std::fflush(stdout);
        }
        ASSIGN_OR_RETURN(const Json results, task->Run(**harness));
        return placement.rank == 0 ? Finish(info, *config, results) : 0;
      });
}

}  // namespace eval
}  // namespace mt
