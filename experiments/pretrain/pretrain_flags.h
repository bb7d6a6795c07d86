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
#include "train/gpt_trainer.h"
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

namespace mt {
namespace experiments {

// Fills the model, trainer, schedule, optimizer, parallelism, data and checkpoint fields of a
// pretraining config (PretrainGptConfig or PretrainBertConfig) from the common flags. The model
// comes from --model (which must be of `family`) with explicitly given model flags overriding it,
// or from the flags alone. `vocab_size` is the binary's own --vocab_size.
template <typename Config>
absl::Status ApplyCommonFlags(models::Family family, int64_t vocab_size, Config* c) {
  models::ModelConfig& m = c->model;
  if (!FLAGS_model.empty()) {
    auto r = models::FindModel(FLAGS_model);
    if (!r.ok()) return r.status();
    if (r->config.family != family) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--model=", FLAGS_model, " is not a ", family == models::Family::kGpt2 ? "GPT" : "BERT",
          " model"));
    }
    m = r->config;
  }
  const auto given = [](const char* flag) {
    return !gflags::GetCommandLineFlagInfoOrDie(flag).is_default;
  };
  if (FLAGS_model.empty() || given("num_layers")) m.num_layers = FLAGS_num_layers;
  if (FLAGS_model.empty() || given("hidden_size")) m.hidden_size = FLAGS_hidden_size;
  if (FLAGS_model.empty() || given("num_attention_heads")) {
    m.num_attention_heads = FLAGS_num_attention_heads;
  }
  if (FLAGS_model.empty() || given("vocab_size")) m.vocab_size = vocab_size;
  if (FLAGS_model.empty() || given("hidden_dropout")) {
    m.hidden_dropout = static_cast<float>(FLAGS_hidden_dropout);
  }
  if (FLAGS_model.empty() || given("attention_dropout")) {
    m.attention_dropout = static_cast<float>(FLAGS_attention_dropout);
  }
  if (FLAGS_model.empty()) {
    m.family = family;
    m.max_position_embeddings =
        FLAGS_max_position_embeddings > 0 ? FLAGS_max_position_embeddings : FLAGS_seq_length;
  } else if (given("max_position_embeddings")) {
    m.max_position_embeddings = FLAGS_max_position_embeddings;
  }
  m.ffn_hidden_size = FLAGS_ffn_hidden_size;
  m.make_vocab_size_divisible_by = FLAGS_make_vocab_size_divisible_by;
  if (FLAGS_fp16 && FLAGS_bf16) {
    return absl::InvalidArgumentError("--fp16 and --bf16 are exclusive; pick one (or neither: f32)");
  }
  c->compute_dtype = FLAGS_fp16 ? DType::kF16 : FLAGS_bf16 ? DType::kBF16 : DType::kF32;
  train::TrainerConfig& t = c->trainer;
  t.micro_batch_size = FLAGS_micro_batch_size;
  t.global_batch_size = FLAGS_global_batch_size;
  t.seq_length = FLAGS_seq_length;
  t.train_iters = FLAGS_train_iters;
  t.log_interval = FLAGS_log_interval;
  t.eval_interval = FLAGS_eval_interval;
  t.eval_iters = FLAGS_eval_iters;
  t.seed = FLAGS_seed;
  t.recompute = FLAGS_recompute;
  t.log_jsonl = FLAGS_log_jsonl;
  auto style = train::ParseDecayStyle(FLAGS_lr_decay_style);
  if (!style.ok()) return style.status();
  c->lr.style = *style;
  c->lr.max_lr = FLAGS_lr;
  c->lr.min_lr = FLAGS_min_lr;
  c->lr.warmup_samples = FLAGS_lr_warmup_samples;
  c->lr.decay_samples = FLAGS_lr_decay_samples > 0
                            ? FLAGS_lr_decay_samples
                            : static_cast<int64_t>(FLAGS_train_iters) * FLAGS_global_batch_size;
  c->weight_decay = FLAGS_weight_decay;
  c->clip_grad = FLAGS_clip_grad;
  c->tensor_model_parallel_size = FLAGS_tensor_model_parallel_size;
  c->data_path = FLAGS_data_path;
  c->split = FLAGS_split;
  c->save = FLAGS_save;
  c->load = FLAGS_load;
  c->save_interval = FLAGS_save_interval;
  c->keep_last = FLAGS_keep_last;
  c->threads = FLAGS_threads;
  return absl::OkStatus();
}

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
