#include "jobs/pretrain/driver.h"

#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/mpi_main.h"
#include "core/config_flags.h"
#include "core/precision.h"
#include "core/status.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "models/registry.h"

namespace mt {
namespace jobs {

namespace {

// --fp16 / --bf16 / --fp32, registered when the program starts (never destroyed): every binary
// that links the drivers (the pretraining drivers, the variants', quickstart) takes them.
const ConfigFlags<PrecisionFlags>* const kPrecisionFlags =
    new ConfigFlags<PrecisionFlags>(PrecisionFlags());

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
  ASSIGN_OR_RETURN(const PrecisionFlags precision, kPrecisionFlags->WithGiven(PrecisionFlags()));
  ASSIGN_OR_RETURN(c->compute_dtype, precision.Resolve(c->device));
  return absl::OkStatus();
}

int PretrainMain(int argc, char** argv, const comm::MainInfo& info, PretrainConfig* config,
                 const std::function<absl::Status()>& apply_flags,
                 const std::function<absl::StatusOr<PretrainResult>(
                     const LocalRanks&, comm::Communicator&, const std::atomic<bool>*)>& run) {
  comm::MpiMainOptions options;
  options.stop_signals = {SIGTERM};
  options.rewrite_args = JoinDataPathWords;
  return comm::MpiMain(
      argc, argv, info,
      [&](int world_size) -> absl::Status {
        RETURN_IF_ERROR(ResolveFlags(config, apply_flags));
        return config->Validate(world_size);
      },
      [&](const comm::MpiProcess& p) -> absl::StatusOr<int> {
        ASSIGN_OR_RETURN(const PretrainResult result,
                         run({p.local_rank, p.local_size}, p.world, p.stop));
        if (result.stopped_by_signal && p.world.rank() == 0) {
          std::printf("stopped by SIGTERM at iteration %lld\n",
                      static_cast<long long>(result.iterations));
        }
        return 0;
      },
      options);
}

}  // namespace jobs
}  // namespace mt
