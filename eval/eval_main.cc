#include "eval/eval_main.h"

#include <cstdio>
#include <string>
#include <utility>

#include "absl/strings/str_replace.h"
#include "gflags/gflags.h"
#include "glog/logging.h"

namespace mt {
namespace eval {

void PrintError(const MainInfo& info, const absl::Status& status) {
  const std::string line = absl::StrReplaceAll(status.message(), {{"\n", " "}});
  std::fprintf(stderr, "%s: error: %s\n", info.name, line.c_str());
}

std::optional<EvalProcess> StartProcess(int argc, char** argv, const MainInfo& info,
                                        const std::function<absl::Status()>& apply_flags) {
  gflags::SetUsageMessage(info.usage);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  auto runtime = comm::MpiRuntime::Init(&argc, &argv);
  if (!runtime.ok()) {
    PrintError(info, runtime.status());
    return std::nullopt;
  }
  auto world = (*runtime)->World();
  if (!world.ok()) comm::MpiRuntime::Abort(world.status());
  // Flags are the same on every rank, so every rank fails alike here.
  const absl::Status flags =
      argc > 1 ? absl::InvalidArgumentError(std::string("unexpected argument '") + argv[1] + "'")
               : apply_flags();
  if (!flags.ok()) {
    if ((*world)->rank() == 0) PrintError(info, flags);
    return std::nullopt;
  }
  return EvalProcess{std::move(*runtime), std::move(*world)};
}

int EvalMain(int argc, char** argv, const MainInfo& info,
             const std::function<absl::Status()>& apply_flags, const EvalRun& run) {
  std::optional<EvalProcess> p = StartProcess(argc, argv, info, apply_flags);
  if (!p) return 1;
  const absl::Status s = run(*p->world, p->runtime->local_rank(), p->runtime->local_size());
  if (!s.ok()) comm::MpiRuntime::Abort(s);
  return 0;
}

}  // namespace eval
}  // namespace mt
