#include "experiments/pretrain/pretrain_gpt.h"

#include <cmath>
#include <filesystem>
#include <cstdio>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "comm/parallel_context.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "data/gpt_dataset/gpt_dataset.h"
#include "data/indexed/indexed_dataset.h"
#include "data/loader/loader.h"
#include "data/tokenizers/factory.h"
#include "models/gpt2/gpt2.h"
#include "nn/parameter.h"
#include "train/loss_scaler.h"
#include "train/optimizer.h"
#include "train/training_state.h"

namespace mt {
namespace experiments {

absl::Status PretrainGptConfig::Validate(int world_size) const {
  RETURN_IF_ERROR(model.ValidateParallel(tensor_model_parallel_size));
  RETURN_IF_ERROR(lr.Validate());
  const train::TrainerConfig& t = trainer;
  if (world_size % tensor_model_parallel_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("world size ", world_size,
                                                   " is not divisible by tensor_model_parallel_size ",
                                                   tensor_model_parallel_size));
  }
  const int dp = world_size / tensor_model_parallel_size;
  if (t.micro_batch_size < 1 || t.global_batch_size % (t.micro_batch_size * dp) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "global_batch_size ", t.global_batch_size, " must be a multiple of micro_batch_size ",
        t.micro_batch_size, " x data-parallel size ", dp));
  }
  if (t.seq_length < 1 || t.seq_length > model.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat("seq_length ", t.seq_length,
                                                   " must be in [1, max_position_embeddings = ",
                                                   model.max_position_embeddings, "]"));
  }
  if (t.train_iters < 1) return absl::InvalidArgumentError("train_iters must be >= 1");
  if (t.log_interval < 1) return absl::InvalidArgumentError("log_interval must be >= 1");
  if (data_path.empty()) return absl::InvalidArgumentError("--data_path is required");
  if (std::error_code ec; !std::filesystem::exists(data_path + ".idx", ec)) {
    return absl::NotFoundError(absl::StrCat("--data_path ", data_path, ": ", data_path,
                                            ".idx does not exist (make one with //data:preprocess)"));
  }
  if (save_interval < 0) return absl::InvalidArgumentError("save_interval must be >= 0");
  if (!IsFloating(compute_dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("compute dtype ", DTypeName(compute_dtype),
                                                   " must be f32, bf16 (--bf16) or f16 (--fp16)"));
  }
  return absl::OkStatus();
}

std::string PretrainGptConfig::DebugString() const {
  const train::TrainerConfig& t = trainer;
  return absl::StrCat(
      model.DebugString(),
      absl::StrFormat(
          "tensor_model_parallel_size: %d\nseq_length: %d\nmicro_batch_size: %d\n"
          "global_batch_size: %d\ntrain_iters: %d\nlr: %g\nmin_lr: %g\nlr_warmup_samples: %d\n"
          "lr_decay_samples: %d\nlr_decay_style: %s\nweight_decay: %g\nclip_grad: %g\n"
          "recompute: %s\nseed: %d\ndata_path: %s\nsplit: %s\nsave: %s\nload: %s\n"
          "save_interval: %d\neval_interval: %d\neval_iters: %d\nlog_interval: %d\n",
          tensor_model_parallel_size, t.seq_length, t.micro_batch_size, t.global_batch_size,
          t.train_iters, lr.max_lr, lr.min_lr, lr.warmup_samples, lr.decay_samples,
          lr.style == train::DecayStyle::kCosine   ? "cosine"
          : lr.style == train::DecayStyle::kLinear ? "linear"
                                                   : "constant",
          weight_decay, clip_grad, t.recompute ? "true" : "false", t.seed, data_path, split, save,
          load, save_interval, t.eval_interval, t.eval_iters, t.log_interval),
      absl::StrFormat("compute_dtype: %s\nloss_scale: %s\n", DTypeName(compute_dtype),
                      compute_dtype == DType::kF16 ? "dynamic" : "1"));
}

namespace {

absl::StatusOr<std::unique_ptr<data::Loader>> MakeLoader(
    std::shared_ptr<const data::IndexedDataset> indexed, data::Split split,
    const PretrainGptConfig& c, const comm::ParallelContext& parallel, int64_t num_samples,
    int64_t consumed, int64_t global_batch) {
  data::GptDatasetConfig dc;
  dc.split = c.split;
  dc.seq_len = c.trainer.seq_length;
  dc.num_samples = num_samples;
  dc.seed = c.trainer.seed;
  ASSIGN_OR_RETURN(auto ds, data::GptDataset::Create(indexed, split, dc));
  data::LoaderConfig lc;
  lc.micro_batch_size = c.trainer.micro_batch_size;
  lc.global_batch_size = global_batch;
  lc.data_parallel_size = parallel.dp_size();
  lc.data_parallel_rank = parallel.dp_rank();
  lc.consumed_samples = consumed;
  return data::Loader::Create(data::GptSampleSource(std::shared_ptr<const data::GptDataset>(std::move(ds))), lc);
}

// Samples `n` tokens after `prompt` with temperature 0.8 / top-k 40; identical on every rank (same
// gathered logits, same seed).
absl::StatusOr<std::string> Generate(models::GptModel& model, const nn::StepContext& base,
                                     const std::string& prompt, int n, uint64_t seed) {
  ASSIGN_OR_RETURN(auto tokenizer, data::CreateTokenizer("gpt2"));
  std::vector<int32_t> ids;
  tokenizer->EncodeAppend(prompt, &ids);
  if (ids.empty()) ids.push_back(tokenizer->special_tokens().eod);
  std::mt19937_64 rng(seed);
  nn::StepContext sc = base;
  sc.mode = nn::Mode::kEval;
  const int64_t max_t = model.config().max_position_embeddings;
  const int64_t V = model.config().vocab_size;
  for (int i = 0; i < n; ++i) {
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(ids.size()), max_t);
    Tensor tokens = Tensor::Host({1, T}, DType::kI32);
    std::copy(ids.end() - T, ids.end(), tokens.data_as<int32_t>());
    Tensor logits = Tensor::Host({T, model.padded_vocab()}, DType::kF32);
    RETURN_IF_ERROR(model.Logits(sc, tokens.view(), logits.view()));
    const float* last = logits.data_as<float>() + (T - 1) * model.padded_vocab();
    std::vector<std::pair<float, int>> top;
    for (int64_t v = 0; v < V; ++v) top.push_back({last[v], static_cast<int>(v)});
    std::partial_sort(top.begin(), top.begin() + 40, top.end(), std::greater<>());
    top.resize(40);
    std::vector<double> p;
    for (auto& [l, v] : top) p.push_back(std::exp((l - top[0].first) / 0.8));
    std::discrete_distribution<int> pick(p.begin(), p.end());
    ids.push_back(top[pick(rng)].second);
  }
  return tokenizer->Decode(ids);
}

}  // namespace

absl::StatusOr<PretrainResult> RunPretrainGpt(const PretrainGptConfig& c,
                                              comm::Communicator& world,
                                              const std::atomic<bool>* stop) {
  RETURN_IF_ERROR(c.Validate(world.size()));
  comm::ParallelConfig pc;
  pc.tensor_parallel = c.tensor_model_parallel_size;
  ASSIGN_OR_RETURN(auto parallel,
                   comm::ParallelContext::Create(world, pc, c.model.num_attention_heads));
  const bool rank0 = parallel->rank() == 0;
  if (rank0 && !c.trainer.quiet) {
    std::printf("------------------------ arguments ------------------------\n%s"
                "world_size: %d (data-parallel size %d)\n"
                "-------------------- end of arguments ---------------------\n",
                c.DebugString().c_str(), parallel->world_size(), parallel->dp_size());
  }
  int threads = c.threads;
  if (threads <= 0) {
    // Share the cores among the ranks of this machine (all ranks assumed local when unknown).
    const int local = world.size();
    threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / local);
  }
  ThreadPool pool(threads);
  ExecContext ec;
  ec.pool = &pool;

  // Model, optimizer, schedule.
  nn::ParameterStore store(parallel->tp_rank(), parallel->tp_size(), c.compute_dtype);
  ASSIGN_OR_RETURN(auto model, models::GptModel::Create(c.model, &store,
                                                        c.trainer.recompute ? nn::Recompute::kYes
                                                                            : nn::Recompute::kNo));
  RETURN_IF_ERROR(store.Allocate(c.trainer.seed));
  train::OptimizerConfig oc;
  oc.weight_decay = static_cast<float>(c.weight_decay);
  oc.clip_grad = c.clip_grad;
  ASSIGN_OR_RETURN(train::Optimizer optimizer, train::Optimizer::Create(&store, oc));
  train::LrSchedule schedule(c.lr);
  train::LossScalerConfig scaler_config;
  scaler_config.dynamic = c.compute_dtype == DType::kF16;  // bf16 and f32 need no loss scaling.
  train::LossScaler scaler(scaler_config);
  train::TrainingCounters counters;
  counters.seed = c.trainer.seed;
  if (!c.load.empty()) {
    absl::Status s = train::LoadTrainingState(c.load, *parallel, c.model, &store, &optimizer,
                                              &scaler, &schedule, &counters);
    if (s.ok()) {
      if (rank0 && !c.trainer.quiet) {
        std::printf("loaded checkpoint from %s at iteration %lld (consumed samples %lld)\n",
                    c.load.c_str(), static_cast<long long>(counters.iteration),
                    static_cast<long long>(counters.consumed_samples));
      }
    } else if (absl::IsNotFound(s)) {
      if (rank0 && !c.trainer.quiet) {
        std::printf("no checkpoint in %s: starting from scratch\n", c.load.c_str());
      }
    } else {
      return s;
    }
  }

  // Data.
  ASSIGN_OR_RETURN(auto indexed_unique, data::IndexedDataset::Open(c.data_path));
  std::shared_ptr<const data::IndexedDataset> indexed(std::move(indexed_unique));
  const int64_t global = c.trainer.global_batch_size;
  ASSIGN_OR_RETURN(auto train_loader,
                   MakeLoader(indexed, data::Split::kTrain, c, *parallel,
                              c.trainer.train_iters * global, counters.consumed_samples, global));
  // Every evaluation reads the same first eval_iters micro-steps of the validation split.
  bool has_valid = false;
  if (c.trainer.eval_iters > 0) {
    const int64_t step = c.trainer.micro_batch_size * parallel->dp_size();
    auto v = MakeLoader(indexed, data::Split::kValid, c, *parallel, c.trainer.eval_iters * step, 0,
                        step);
    has_valid = v.ok();
    if (!has_valid && rank0 && !c.trainer.quiet) {
      std::printf("no validation data (%s): evaluation disabled\n",
                  std::string(v.status().message()).c_str());
    }
  }

  train::TrainerConfig tc = c.trainer;
  if (!rank0) tc.log_jsonl.clear();
  // Evaluation runs from the iteration hook with a fresh validation loader each time, so every
  // evaluation scores the same fixed validation samples.
  const int eval_interval = tc.eval_interval;
  tc.eval_interval = 0;
  train::GptTrainer trainer(tc, parallel.get(), &ec, model.get(), &store, &optimizer, &schedule,
                            &scaler);
  trainer.set_consumed_samples(counters.consumed_samples);
  trainer.set_skipped_iterations(counters.skipped_iterations);
  auto save = [&](int64_t iteration) -> absl::Status {
    train::TrainingCounters now = counters;
    now.iteration = iteration;
    now.consumed_samples = trainer.consumed_samples();
    now.skipped_iterations = trainer.skipped_iterations();
    RETURN_IF_ERROR(train::SaveTrainingState(c.save, c.keep_last, *parallel, c.model, store,
                                             optimizer, scaler, schedule, now));
    if (rank0 && !c.trainer.quiet) {
      std::printf("saved checkpoint at iteration %lld to %s\n", static_cast<long long>(iteration),
                  c.save.c_str());
    }
    return absl::OkStatus();
  };
  auto evaluate = [&]() -> absl::StatusOr<train::EvalResult> {
    const int64_t step = c.trainer.micro_batch_size * parallel->dp_size();
    ASSIGN_OR_RETURN(auto loader, MakeLoader(indexed, data::Split::kValid, c, *parallel,
                                             std::max(1, c.trainer.eval_iters) * step, 0, step));
    return trainer.Evaluate(loader.get());
  };
  auto on_iteration = [&](int64_t iteration) -> absl::Status {
    if (has_valid && eval_interval > 0 && iteration % eval_interval == 0) {
      ASSIGN_OR_RETURN(train::EvalResult e, evaluate());
      if (rank0 && !c.trainer.quiet) {
        std::printf(" validation at iteration %lld | lm loss: %.6E | lm loss PPL: %.6E\n",
                    static_cast<long long>(iteration), e.loss, e.perplexity);
      }
    }
    if (!c.save.empty() && c.save_interval > 0 && iteration % c.save_interval == 0 &&
        iteration < c.trainer.train_iters) {
      return save(iteration);
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(trainer.Train(train_loader.get(), nullptr, counters.iteration, stop,
                                on_iteration));

  PretrainResult result;
  result.iterations = trainer.iteration();
  result.stopped_by_signal = trainer.stopped_early();
  if (!trainer.history().empty()) {
    result.first_loss = trainer.history().front().loss;
    result.last_loss = trainer.history().back().loss;
  }
  if (!c.save.empty() && (result.stopped_by_signal || trainer.iteration() > counters.iteration)) {
    RETURN_IF_ERROR(save(trainer.iteration()));
  }
  if (has_valid && !result.stopped_by_signal) {
    ASSIGN_OR_RETURN(train::EvalResult e, evaluate());
    result.valid_loss = e.loss;
    result.valid_perplexity = e.perplexity;
    if (rank0 && !c.trainer.quiet) {
      std::printf(" validation at the end | lm loss: %.6E | lm loss PPL: %.6E\n", e.loss,
                  e.perplexity);
    }
  }
  if (!c.generate_prompt.empty() && !result.stopped_by_signal) {
    nn::StepContext sc;
    sc.exec = &ec;
    sc.tp = parallel->tp_size() > 1 ? &parallel->tp() : nullptr;
    ASSIGN_OR_RETURN(std::string text, Generate(*model, sc, c.generate_prompt, c.generate_tokens,
                                                c.trainer.seed));
    if (rank0) std::printf("--- sample ---\n%s\n--------------\n", text.c_str());
  }
  return result;
}

}  // namespace experiments
}  // namespace mt
