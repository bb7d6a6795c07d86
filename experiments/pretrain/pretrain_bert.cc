#include "experiments/pretrain/pretrain_bert.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "comm/parallel_context.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "data/bert_dataset/bert_dataset.h"
#include "data/bert_dataset/bert_vocab.h"
#include "data/indexed/indexed_dataset.h"
#include "data/loader/bert_loader.h"
#include "data/tokenizers/wordpiece.h"
#include "models/bert/bert.h"
#include "nn/parameter.h"
#include "train/bert_trainer.h"
#include "train/loss_scaler.h"
#include "train/optimizer.h"
#include "train/training_state.h"

namespace mt {
namespace experiments {

absl::Status PretrainBertConfig::Validate(int world_size) const {
  if (model.family != models::Family::kBert || model.num_token_types < 1) {
    return absl::InvalidArgumentError("model config is not a BERT config (family bert, "
                                      "num_token_types >= 1)");
  }
  RETURN_IF_ERROR(model.ValidateParallel(tensor_model_parallel_size));
  RETURN_IF_ERROR(lr.Validate());
  const train::TrainerConfig& t = trainer;
  if (world_size % tensor_model_parallel_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("world size ", world_size, " is not divisible by tensor_model_parallel_size ",
                     tensor_model_parallel_size));
  }
  const int dp = world_size / tensor_model_parallel_size;
  if (t.micro_batch_size < 1 || t.global_batch_size % (t.micro_batch_size * dp) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "global_batch_size ", t.global_batch_size, " must be a multiple of micro_batch_size ",
        t.micro_batch_size, " x data-parallel size ", dp));
  }
  if (t.seq_length < 5 || t.seq_length > model.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat("seq_length ", t.seq_length,
                                                   " must be in [5, max_position_embeddings = ",
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
  if (!(mask_prob > 0 && mask_prob <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("mask_prob ", mask_prob, " must be in (0, 1]"));
  }
  if (!(short_seq_prob >= 0 && short_seq_prob <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("short_seq_prob ", short_seq_prob, " must be in [0, 1]"));
  }
  if (!IsFloating(compute_dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("compute dtype ", DTypeName(compute_dtype),
                                                   " must be f32, bf16 (--bf16) or f16 (--fp16)"));
  }
  return absl::OkStatus();
}

std::string PretrainBertConfig::DebugString() const {
  const train::TrainerConfig& t = trainer;
  return absl::StrCat(
      model.DebugString(),
      absl::StrFormat(
          "tensor_model_parallel_size: %d\nseq_length: %d\nmicro_batch_size: %d\n"
          "global_batch_size: %d\ntrain_iters: %d\nlr: %g\nmin_lr: %g\nlr_warmup_samples: %d\n"
          "lr_decay_samples: %d\nlr_decay_style: %s\nweight_decay: %g\nclip_grad: %g\n"
          "recompute: %s\nseed: %d\ndata_path: %s\nvocab_file: %s\nsplit: %s\nsave: %s\n"
          "load: %s\nsave_interval: %d\neval_interval: %d\neval_iters: %d\nlog_interval: %d\n"
          "mask_prob: %g\nshort_seq_prob: %g\n",
          tensor_model_parallel_size, t.seq_length, t.micro_batch_size, t.global_batch_size,
          t.train_iters, lr.max_lr, lr.min_lr, lr.warmup_samples, lr.decay_samples,
          lr.style == train::DecayStyle::kCosine   ? "cosine"
          : lr.style == train::DecayStyle::kLinear ? "linear"
                                                   : "constant",
          weight_decay, clip_grad, t.recompute ? "true" : "false", t.seed, data_path,
          vocab_file.empty() ? "(installed bert-base-uncased)" : vocab_file, split, save, load,
          save_interval, t.eval_interval, t.eval_iters, t.log_interval, mask_prob,
          short_seq_prob),
      absl::StrFormat("compute_dtype: %s\nloss_scale: %s\n", DTypeName(compute_dtype),
                      compute_dtype == DType::kF16 ? "dynamic" : "1"));
}

namespace {

absl::StatusOr<std::unique_ptr<data::BertLoader>> MakeLoader(
    std::shared_ptr<const data::IndexedDataset> indexed, data::Split split,
    const PretrainBertConfig& c, const data::BertVocab& vocab,
    const comm::ParallelContext& parallel, int64_t num_samples, int64_t consumed,
    int64_t global_batch) {
  data::BertDatasetConfig dc;
  dc.split = c.split;
  dc.seq_len = c.trainer.seq_length;
  dc.num_samples = num_samples;
  dc.seed = c.trainer.seed;
  dc.short_seq_prob = c.short_seq_prob;
  dc.masking.masked_lm_prob = c.mask_prob;
  ASSIGN_OR_RETURN(auto ds, data::BertDataset::Create(indexed, split, dc, vocab));
  data::LoaderConfig lc;
  lc.micro_batch_size = c.trainer.micro_batch_size;
  lc.global_batch_size = global_batch;
  lc.data_parallel_size = parallel.dp_size();
  lc.data_parallel_rank = parallel.dp_rank();
  lc.consumed_samples = consumed;
  return data::BertLoader::Create(std::shared_ptr<const data::BertDataset>(std::move(ds)), lc);
}

absl::StatusOr<data::BertVocab> LoadVocab(const PretrainBertConfig& c) {
  std::unique_ptr<data::WordPiece> wp;
  if (c.vocab_file.empty()) {
    ASSIGN_OR_RETURN(wp, data::WordPiece::LoadDefault());
  } else {
    ASSIGN_OR_RETURN(wp, data::WordPiece::Load(c.vocab_file));
  }
  ASSIGN_OR_RETURN(data::BertVocab vocab, data::BertVocab::FromWordPiece(*wp));
  if (vocab.vocab_size != c.model.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--vocab_size ", c.model.vocab_size, " differs from the WordPiece vocabulary's ",
        vocab.vocab_size, " tokens"));
  }
  return vocab;
}

}  // namespace

absl::StatusOr<PretrainBertResult> RunPretrainBert(const PretrainBertConfig& c,
                                                   comm::Communicator& world,
                                                   const std::atomic<bool>* stop) {
  RETURN_IF_ERROR(c.Validate(world.size()));
  comm::ParallelConfig pc;
  pc.tensor_parallel = c.tensor_model_parallel_size;
  ASSIGN_OR_RETURN(auto parallel,
                   comm::ParallelContext::Create(world, pc, c.model.num_attention_heads));
  const bool rank0 = parallel->rank() == 0;
  const bool verbose = rank0 && !c.trainer.quiet;
  if (verbose) {
    std::printf("------------------------ arguments ------------------------\n%s"
                "world_size: %d (data-parallel size %d)\n"
                "-------------------- end of arguments ---------------------\n",
                c.DebugString().c_str(), parallel->world_size(), parallel->dp_size());
  }
  int threads = c.threads;
  if (threads <= 0) {
    threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / world.size());
  }
  ThreadPool pool(threads);
  ExecContext ec;
  ec.pool = &pool;
  ASSIGN_OR_RETURN(data::BertVocab vocab, LoadVocab(c));

  // Model, optimizer, schedule.
  nn::ParameterStore store(parallel->tp_rank(), parallel->tp_size(), c.compute_dtype);
  ASSIGN_OR_RETURN(auto model,
                   models::BertModel::Create(c.model, &store, models::BertHeads::kPretraining,
                                             c.trainer.recompute ? nn::Recompute::kYes
                                                                 : nn::Recompute::kNo));
  RETURN_IF_ERROR(store.Allocate(c.trainer.seed));
  train::OptimizerConfig oc;
  oc.weight_decay = static_cast<float>(c.weight_decay);
  oc.clip_grad = c.clip_grad;
  ASSIGN_OR_RETURN(train::Optimizer optimizer, train::Optimizer::Create(&store, oc));
  train::LrSchedule schedule(c.lr);
  train::LossScalerConfig scaler_config;
  scaler_config.dynamic = c.compute_dtype == DType::kF16;
  train::LossScaler scaler(scaler_config);
  train::TrainingCounters counters;
  counters.seed = c.trainer.seed;
  if (!c.load.empty()) {
    absl::Status s = train::LoadTrainingState(c.load, *parallel, c.model, &store, &optimizer,
                                              &scaler, &schedule, &counters);
    if (s.ok()) {
      if (verbose) {
        std::printf("loaded checkpoint from %s at iteration %lld (consumed samples %lld)\n",
                    c.load.c_str(), static_cast<long long>(counters.iteration),
                    static_cast<long long>(counters.consumed_samples));
      }
    } else if (absl::IsNotFound(s)) {
      if (verbose) std::printf("no checkpoint in %s: starting from scratch\n", c.load.c_str());
    } else {
      return s;
    }
  }

  // Data.
  ASSIGN_OR_RETURN(auto indexed_unique, data::IndexedDataset::Open(c.data_path));
  std::shared_ptr<const data::IndexedDataset> indexed(std::move(indexed_unique));
  const int64_t global = c.trainer.global_batch_size;
  ASSIGN_OR_RETURN(auto train_loader,
                   MakeLoader(indexed, data::Split::kTrain, c, vocab, *parallel,
                              c.trainer.train_iters * global, counters.consumed_samples, global));
  const int64_t step = c.trainer.micro_batch_size * parallel->dp_size();
  bool has_valid = false;
  if (c.trainer.eval_iters > 0) {
    auto v = MakeLoader(indexed, data::Split::kValid, c, vocab, *parallel,
                        c.trainer.eval_iters * step, 0, step);
    has_valid = v.ok();
    if (!has_valid && verbose) {
      std::printf("no validation data (%s): evaluation disabled\n",
                  std::string(v.status().message()).c_str());
    }
  }

  train::TrainerConfig tc = c.trainer;
  if (!rank0) tc.log_jsonl.clear();
  // Every evaluation scores the same first eval_iters micro-steps of the validation split (a
  // fresh loader each time, from the iteration hook).
  const int eval_interval = tc.eval_interval;
  tc.eval_interval = 0;
  train::BertTrainer trainer(tc, parallel.get(), &ec, model.get(), &store, &optimizer, &schedule,
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
    if (verbose) {
      std::printf("saved checkpoint at iteration %lld to %s\n", static_cast<long long>(iteration),
                  c.save.c_str());
    }
    return absl::OkStatus();
  };
  auto evaluate = [&]() -> absl::StatusOr<train::BertEvalResult> {
    ASSIGN_OR_RETURN(auto loader, MakeLoader(indexed, data::Split::kValid, c, vocab, *parallel,
                                             std::max(1, c.trainer.eval_iters) * step, 0, step));
    return trainer.Evaluate(loader.get());
  };
  auto on_iteration = [&](int64_t iteration) -> absl::Status {
    if (has_valid && eval_interval > 0 && iteration % eval_interval == 0) {
      ASSIGN_OR_RETURN(train::BertEvalResult e, evaluate());
      if (verbose) {
        std::printf(" validation at iteration %lld | lm loss: %.6E | lm loss PPL: %.6E | sop "
                    "loss: %.6E\n",
                    static_cast<long long>(iteration), e.lm_loss, e.lm_perplexity, e.sop_loss);
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

  PretrainBertResult result;
  result.iterations = trainer.iteration();
  result.stopped_by_signal = trainer.stopped_early();
  if (!trainer.history().empty()) {
    result.first_lm_loss = trainer.history().front().lm_loss;
    result.last_lm_loss = trainer.history().back().lm_loss;
    result.first_sop_loss = trainer.history().front().sop_loss;
    result.last_sop_loss = trainer.history().back().sop_loss;
  }
  if (!c.save.empty() && (result.stopped_by_signal || trainer.iteration() > counters.iteration)) {
    RETURN_IF_ERROR(save(trainer.iteration()));
  }
  if (has_valid && !result.stopped_by_signal) {
    ASSIGN_OR_RETURN(train::BertEvalResult e, evaluate());
    result.valid_lm_loss = e.lm_loss;
    result.valid_sop_loss = e.sop_loss;
    if (verbose) {
      std::printf(" validation at the end | lm loss: %.6E | lm loss PPL: %.6E | sop loss: %.6E\n",
                  e.lm_loss, e.lm_perplexity, e.sop_loss);
    }
  }
  return result;
}

}  // namespace experiments
}  // namespace mt
