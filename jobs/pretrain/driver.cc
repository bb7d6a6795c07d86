#include "jobs/pretrain/driver.h"

#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/mpi_communicator.h"
#include "comm/watchdog.h"
#include "core/config_flags.h"
#include "core/status.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "models/registry.h"

DEFINE_bool(fp16, false, "f16 compute (f32 master weights) with dynamic loss scaling.");
DEFINE_bool(bf16, false, "bf16 compute (f32 master weights), no loss scaling.");
DEFINE_bool(fp32, false, "f32 compute (the default on the CPU).");
DEFINE_double(distributed_timeout, 600,
              "Seconds a rank may be silent (stopped, hung) or one communicator call may wait "
              "before the whole job is ended with a message naming the rank (0: off; "
              "comm/watchdog.h).");

namespace mt {
namespace jobs {

namespace {

// Set by SIGTERM; read by the training loop between iterations.
std::atomic<bool> stop_requested{false};
void OnSigterm(int) { stop_requested.store(true); }

absl::Status ResolvePrecision(PretrainConfig* c) {
  if (FLAGS_fp16 + FLAGS_bf16 + FLAGS_fp32 > 1) {
    return absl::InvalidArgumentError(
        "--fp16, --bf16 and --fp32 are exclusive; pick one (default: f32 on the CPU, bf16 on "
        "CUDA)");
  }
  const DType default_dtype = c->device == DeviceKind::kCuda ? DType::kBF16 : DType::kF32;
  c->compute_dtype = FLAGS_fp16   ? DType::kF16
                     : FLAGS_bf16 ? DType::kBF16
                     : FLAGS_fp32 ? DType::kF32
                                  : default_dtype;
  return absl::OkStatus();
}

// Megatron spells a blend `--data_path 0.3 A 0.7 B`: gflags would take "0.3" as the value and
// leave the rest as arguments, so the words after a bare --data_path (up to the next flag) are
// joined into one value first. The joined strings live as long as the process.
void JoinDataPathWords(int* argc, char** argv) {
  static std::vector<std::string>* joined = new std::vector<std::string>();
  int out = 0;
  for (int i = 0; i < *argc; ++i) {
    const std::string arg = argv[i];
    if (arg != "--data_path" && arg != "-data_path") {
      argv[out++] = argv[i];
      continue;
    }
    std::string value;
    int j = i + 1;
    for (; j < *argc && argv[j][0] != '-'; ++j)
      absl::StrAppend(&value, value.empty() ? "" : " ", argv[j]);
    if (j - i - 1 < 2) {  // Zero or one word: gflags' own spelling.
      argv[out++] = argv[i];
      continue;
    }
    joined->push_back("--data_path=" + value);
    argv[out++] = joined->back().data();
    i = j - 1;
  }
  *argc = out;
}

}  // namespace

comm::MpiThreads WatchdogMpiThreads() {
  return FLAGS_distributed_timeout > 0 ? comm::MpiThreads::kMultiple
                                       : comm::MpiThreads::kSerialized;
}

absl::Status ValidateDistributedTimeout() {
  if (FLAGS_distributed_timeout >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--distributed_timeout=", FLAGS_distributed_timeout,
                   " must be >= 0 seconds (0: no watchdog)"));
}

std::unique_ptr<comm::Watchdog> StartWatchdog(comm::Communicator& world) {
  if (!(FLAGS_distributed_timeout > 0)) return nullptr;
  comm::WatchdogOptions wo;
  wo.timeout_seconds = FLAGS_distributed_timeout;
  wo.timeout_name = "--distributed_timeout";
  auto started = comm::Watchdog::Start(wo);
  if (!started.ok()) comm::MpiRuntime::Abort(started.status());
  world.set_call_monitor((*started)->monitor());
  return std::move(*started);
}

absl::Status ResolveFlags(PretrainConfig* c, const std::function<absl::Status()>& apply_flags) {
  RETURN_IF_ERROR(apply_flags());
  if (!c->model_name.empty()) {
    ASSIGN_OR_RETURN(const models::RegisteredModel m, models::FindModel(c->model_name));
    if (m.config.family != c->model.family) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--model=", c->model_name, " is a ", models::FamilyArchitecture(m.config.family),
          "-family model; this driver trains ", models::FamilyArchitecture(c->model.family),
          "-family models"));
    }
    c->model = m.config;
    RETURN_IF_ERROR(apply_flags());  // The model flags given override the registered config.
  } else if (!FlagGiven("max_position_embeddings")) {
    c->model.max_position_embeddings = c->trainer.seq_length;
  }
  if (c->lr.decay_samples == 0) {
    c->lr.decay_samples = c->trainer.train_iters * c->trainer.global_batch_size;
  }
  return ResolvePrecision(c);
}

int PretrainMain(int argc, char** argv, const DriverInfo& info, PretrainConfig* config,
                 const std::function<absl::Status()>& apply_flags,
                 const std::function<absl::StatusOr<PretrainResult>(
                     const LocalRanks&, comm::Communicator&, const std::atomic<bool>*)>& run) {
  gflags::SetUsageMessage(info.usage);
  FLAGS_minloglevel = 1;  // Library INFO logs (dataset index caching) only with --minloglevel=0.
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  JoinDataPathWords(&argc, argv);
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  auto runtime = comm::MpiRuntime::Init(&argc, &argv, WatchdogMpiThreads());
  if (!runtime.ok()) {
    std::fprintf(stderr, "%s: error: %s\n", info.name,
                 std::string(runtime.status().message()).c_str());
    return 1;
  }
  auto world = (*runtime)->World();
  if (!world.ok()) comm::MpiRuntime::Abort(world.status());
  // Flag validation is deterministic, so every rank fails alike here, before any collective.
  absl::Status valid =
      argc > 1 ? absl::InvalidArgumentError(absl::StrCat("unexpected argument '", argv[1], "'"))
               : ResolveFlags(config, apply_flags);
  if (valid.ok()) valid = config->Validate((*world)->size());
  if (valid.ok()) valid = ValidateDistributedTimeout();
  if (!valid.ok()) {
    if ((*world)->rank() == 0) {
      std::fprintf(stderr, "%s: error: %s\n", info.name, std::string(valid.message()).c_str());
    }
    return 1;
  }
  std::unique_ptr<comm::Watchdog> watchdog = StartWatchdog(**world);
  std::signal(SIGTERM, OnSigterm);
  const LocalRanks local{(*runtime)->local_rank(), (*runtime)->local_size()};
  auto result = run(local, **world, &stop_requested);
  if (!result.ok()) comm::MpiRuntime::Abort(result.status());
  if (watchdog != nullptr) watchdog->Stop();
  if (result->stopped_by_signal && (*world)->rank() == 0) {
    std::printf("stopped by SIGTERM at iteration %lld\n",
                static_cast<long long>(result->iterations));
  }
  return 0;
}

}  // namespace jobs
}  // namespace mt
