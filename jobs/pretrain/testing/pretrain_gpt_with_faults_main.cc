// pretrain_gpt with the faults of the reliability tests (testonly): the production job's code,
// handed a file system that fails at a chosen byte (core/faulty_file_system.h) and a training hook
// that makes losses or gradients non-finite (train/testing/fault_hooks.h). Its flags are
// pretrain_gpt's and these:
//   --file_fault=kill_at_write_byte:N | enospc_at_byte:N | eio_at_byte:N
//                 the N-th byte written through the checkpoint code (counted from the start of
//                 the run, over every file) kills the process, or fails with ENOSPC or EIO;
//   --inject_nonfinite_at_iteration=I   from iteration I (as logged, from 1; 0: never) ...
//   --inject_nonfinite_count=K          ... for K iterations, the loss of data-parallel rank 0
//   --inject_nonfinite_into=loss|grad   becomes NaN, or one reduced gradient element +inf;
//   --slow_rank=R --slow_rank_ms=M      global rank R sleeps M ms in every iteration (a
//                                       straggler; not with --inject_nonfinite_*).
// checkpoint_fault_test.sh, nan_test.sh and observability_test.sh run it; production binaries
// have none of this.
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/config_flags.h"
#include "core/faulty_file_system.h"
#include "core/fields.h"
#include "core/status.h"
#include "gflags/gflags.h"
#include "jobs/pretrain/driver.h"
#include "jobs/pretrain/pretrain_gpt.h"
#include "train/testing/fault_hooks.h"

DEFINE_string(file_fault, "",
              "kill_at_write_byte:N, enospc_at_byte:N or eio_at_byte:N: the fault of the N-th "
              "byte the checkpoint code writes (empty: none).");
DEFINE_int64(inject_nonfinite_at_iteration, 0,
             "Inject NaN (loss) or inf (grad) from this iteration (from 1; 0: never).");
DEFINE_int64(inject_nonfinite_count, 1, "Iterations in a row to inject into.");
DEFINE_string(inject_nonfinite_into, "grad", "loss or grad.");
DEFINE_int32(slow_rank, -1,
             "This global rank sleeps --slow_rank_ms in every iteration (-1: none).");
DEFINE_int64(slow_rank_ms, 0, "Milliseconds the slow rank sleeps per iteration.");

namespace {

using mt::train::testing::NonfiniteInjection;
using mt::train::testing::NonfiniteTarget;
using mt::train::testing::SlowRank;

// The faults the flags ask for, as the job's hooks.
struct Faults {
  std::unique_ptr<mt::FaultyFileSystem> fs;
  std::unique_ptr<NonfiniteInjection> nonfinite;
  std::unique_ptr<SlowRank> slow;
  mt::jobs::JobHooks hooks;

  absl::Status FromFlags() {
    if (FLAGS_inject_nonfinite_at_iteration < 0 || FLAGS_inject_nonfinite_count < 1) {
      return absl::InvalidArgumentError(
          "inject_nonfinite_at_iteration must be >= 0 and inject_nonfinite_count >= 1");
    }
    ASSIGN_OR_RETURN(
        const NonfiniteTarget target,
        mt::ParseEnum<NonfiniteTarget>("inject_nonfinite_into", FLAGS_inject_nonfinite_into,
                                       mt::train::testing::kNonfiniteTargetNames));
    hooks = mt::jobs::JobHooks();
    if (!FLAGS_file_fault.empty()) {
      ASSIGN_OR_RETURN(const mt::FileFaultSpec spec, mt::ParseFileFault(FLAGS_file_fault));
      fs = std::make_unique<mt::FaultyFileSystem>(mt::DefaultFileSystem(), spec);
      hooks.fs = fs.get();
    }
    if (FLAGS_inject_nonfinite_at_iteration > 0) {
      nonfinite = std::make_unique<NonfiniteInjection>(FLAGS_inject_nonfinite_at_iteration,
                                                       FLAGS_inject_nonfinite_count, target);
      hooks.trainer = nonfinite.get();
    }
    if (FLAGS_slow_rank >= 0) {
      if (hooks.trainer != nullptr || FLAGS_slow_rank_ms < 0) {
        return absl::InvalidArgumentError(
            "--slow_rank needs --slow_rank_ms >= 0 and no --inject_nonfinite_*");
      }
      slow = std::make_unique<SlowRank>(FLAGS_slow_rank, FLAGS_slow_rank_ms);
      hooks.trainer = slow.get();
    }
    return absl::OkStatus();
  }
};

}  // namespace

int main(int argc, char** argv) {
  using namespace mt::jobs;  // NOLINT: a main of this package.
  PretrainGptConfig config;
  const mt::ConfigFlags<PretrainGptConfig> flags(config, kNotFlags);
  Faults faults;
  return PretrainMain(
      argc, argv,
      {"pretrain_gpt",
       "pretrain_gpt with test-only faults (--file_fault, --inject_nonfinite_*, --slow_rank)."},
      &config,
      [&]() -> absl::Status {
        RETURN_IF_ERROR(flags.ApplyGiven(&config));
        return faults.FromFlags();
      },
      [&](const LocalRanks& local, mt::comm::Communicator& world, const std::atomic<bool>* stop) {
        return RunPretrainGpt(config, local, world, stop, faults.hooks);
      });
}
