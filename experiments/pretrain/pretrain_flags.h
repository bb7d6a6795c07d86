// What pretrain_gpt and pretrain_bert share: Megatron-LM's flag names (defined once, in
// pretrain_flags.cc), their translation into the typed configs, and the body of main() (MPI
// set-up, one-line errors, SIGTERM). Flags whose meaning differs per model (vocab_size's default,
// vocab files, BERT masking, generation) stay in each binary.
#ifndef MT_EXPERIMENTS_PRETRAIN_PRETRAIN_FLAGS_H_
#define MT_EXPERIMENTS_PRETRAIN_PRETRAIN_FLAGS_H_

#include <atomic>
#include <csignal>
#include <cstdio>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "comm/mpi_communicator.h"
#include "core/dtype.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "models/config.h"
#include "models/registry.h"
#include "experiments/pretrain/pretrain.h"
#include "train/lr_schedule.h"

DECLARE_string(model);
DECLARE_int32(num_layers);
DECLARE_int32(hidden_size);
DECLARE_int32(num_attention_heads);
DECLARE_int32(ffn_hidden_size);
DECLARE_int32(max_position_embeddings);
DECLARE_int32(make_vocab_size_divisible_by);
DECLARE_double(hidden_dropout);
DECLARE_double(attention_dropout);
DECLARE_int32(seq_length);
DECLARE_int32(micro_batch_size);
DECLARE_int32(global_batch_size);
DECLARE_double(lr);
DECLARE_double(min_lr);
DECLARE_int64(lr_warmup_samples);
DECLARE_int64(lr_decay_samples);
DECLARE_string(lr_decay_style);
DECLARE_int32(train_iters);
DECLARE_int32(tensor_model_parallel_size);
DECLARE_bool(fp16);
DECLARE_bool(bf16);
DECLARE_double(clip_grad);
DECLARE_double(weight_decay);
DECLARE_string(save);
DECLARE_string(load);
DECLARE_int32(save_interval);
DECLARE_int32(keep_last);
DECLARE_int32(eval_interval);
DECLARE_int32(eval_iters);
DECLARE_int32(log_interval);
DECLARE_string(log_jsonl);
DECLARE_string(data_path);
DECLARE_string(split);
DECLARE_uint64(seed);
DECLARE_bool(recompute);
DECLARE_int32(threads);
DECLARE_int64(ddp_bucket_size);
DECLARE_bool(overlap_grad_reduce);

namespace mt {
namespace experiments {

// Fills a pretraining config's shared fields (PretrainConfig: model, trainer, schedule,
// optimizer, parallelism, data and checkpoints) from the common flags. The model comes from
// --model (which must be of `family`) with explicitly given model flags overriding it, or from the
// flags alone. `vocab_size` is the binary's own --vocab_size.
absl::Status ApplyCommonFlags(models::Family family, int64_t vocab_size, PretrainConfig* c);

namespace internal {
// Set by SIGTERM; read by the training loop between iterations.
std::atomic<bool>& StopRequested();
void InstallSigtermHandler();
}  // namespace internal

// The main() of a pretraining binary: logging and flag set-up, MPI, the config and its
// Validate(world size) (a one-line error on rank 0 and exit 1 if the flags are bad: every rank
// fails alike before any collective),
// SIGTERM, the run (a failure ends every rank through MpiRuntime::Abort).
template <typename Config, typename Result>
int PretrainMain(int argc, char** argv, const char* name, const char* usage,
                 const std::function<absl::StatusOr<Config>()>& config_from_flags,
                 const std::function<absl::StatusOr<Result>(const Config&, comm::Communicator&,
                                                            const std::atomic<bool>*)>& run) {
  gflags::SetUsageMessage(usage);
  FLAGS_minloglevel = 1;  // Library INFO logs (dataset index caching) only with --minloglevel=0.
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  auto runtime = comm::MpiRuntime::Init(&argc, &argv);
  if (!runtime.ok()) {
    std::fprintf(stderr, "%s: error: %s\n", name, std::string(runtime.status().message()).c_str());
    return 1;
  }
  auto world = (*runtime)->World();
  if (!world.ok()) comm::MpiRuntime::Abort(world.status());
  auto config = config_from_flags();
  // Flag validation is deterministic, so every rank fails alike here, before any collective.
  if (config.ok()) {
    absl::Status valid = config->Validate((*world)->size());
    if (!valid.ok()) config = valid;
  }
  if (!config.ok()) {
    if ((*world)->rank() == 0) {
      std::fprintf(stderr, "%s: error: %s\n", name,
                   std::string(config.status().message()).c_str());
    }
    return 1;
  }
  internal::InstallSigtermHandler();
  auto result = run(*config, **world, &internal::StopRequested());
  if (!result.ok()) comm::MpiRuntime::Abort(result.status());
  if (result->stopped_by_signal && (*world)->rank() == 0) {
    std::printf("stopped by SIGTERM at iteration %lld\n",
                static_cast<long long>(result->iterations));
  }
  return 0;
}

}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_PRETRAIN_PRETRAIN_FLAGS_H_
