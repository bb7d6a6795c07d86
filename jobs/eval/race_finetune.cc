#include "jobs/eval/race_finetune.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "train/training_state.h"

namespace mt {
namespace jobs {

using eval::kRaceChoices;
using eval::RaceBatcher;
using eval::RaceGroup;
using eval::RaceQuestionRef;
namespace {

train::LrScheduleConfig Schedule(const RaceTrainingOptions& o) {
  train::LrScheduleConfig c;
  const int64_t questions = o.total_steps * o.global_batch_size;
  c.max_lr = o.lr;
  c.min_lr = 0;
  c.warmup_samples = std::llround(o.warmup_fraction * static_cast<double>(questions));
  c.decay_samples = questions;
  c.style = train::DecayStyle::kLinear;
  return c;
}

train::LossScalerConfig Scaler(DType compute_dtype) {
  train::LossScalerConfig c;
  c.dynamic = compute_dtype == DType::kF16;  // bf16 and f32 need no loss scaling.
  return c;
}

}  // namespace

RaceFineTuner::RaceFineTuner(nn::ParameterStore* store, const RaceTrainingOptions& options,
                             train::Optimizer optimizer)
    : store_(store),
      options_(options),
      optimizer_(std::move(optimizer)),
      schedule_(Schedule(options)),
      scaler_(Scaler(options.compute_dtype)) {}

absl::StatusOr<std::unique_ptr<RaceFineTuner>> RaceFineTuner::Create(
    nn::ParameterStore* store, const RaceTrainingOptions& options) {
  const RaceTrainingOptions& o = options;
  if (o.micro_batch_size < 1 || o.global_batch_size < 1 ||
      o.global_batch_size % o.micro_batch_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RACE fine-tuning: the global batch (", o.global_batch_size,
        " questions) must be a positive multiple of the micro-batch (", o.micro_batch_size, ")"));
  }
  if (o.total_steps < 1 || !(o.warmup_fraction >= 0 && o.warmup_fraction <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("RACE fine-tuning: need at least one step (got ", o.total_steps,
                     ") and a warmup fraction in [0, 1] (got ", o.warmup_fraction, ")"));
  }
  RETURN_IF_ERROR(Schedule(o).Validate());
  train::OptimizerConfig oc;
  oc.weight_decay = static_cast<float>(o.weight_decay);
  oc.clip_grad = o.clip_grad;
  ASSIGN_OR_RETURN(train::Optimizer optimizer, train::Optimizer::Create(store, oc));
  return std::unique_ptr<RaceFineTuner>(new RaceFineTuner(store, o, std::move(optimizer)));
}

absl::StatusOr<RaceStep> RaceFineTuner::Step(models::Model& model, const nn::StepContext& sc,
                                             RaceBatcher& batcher,
                                             absl::Span<const RaceGroup> groups,
                                             absl::Span<const RaceQuestionRef> questions) {
  const int64_t G = options_.global_batch_size, M = options_.micro_batch_size;
  if (static_cast<int64_t>(questions.size()) != G) {
    return absl::InvalidArgumentError(
        absl::StrCat("RACE fine-tuning: a step takes ", G, " questions, got ", questions.size()));
  }
  ASSIGN_OR_RETURN(models::MultipleChoiceModel * multiple_choice, models::MultipleChoiceOf(model));
  const int64_t micro_batches = G / M;
  RaceStep r;
  r.questions = G;
  r.learning_rate = schedule_.lr();
  r.loss_scale = scaler_.scale();
  RETURN_IF_ERROR(store_->ZeroGrads(*sc.exec));
  for (int64_t m = 0; m < micro_batches; ++m) {
    ASSIGN_OR_RETURN(const models::Batch batch,
                     batcher.Layout(groups, questions.subspan(m * M, M)));
    nn::StepContext micro = sc;
    micro.mode = nn::Mode::kTrain;
    micro.dropout_seed = options_.seed;
    micro.micro_step = static_cast<uint64_t>(steps_);
    micro.sample_offset = m * M * kRaceChoices;
    micro.grads_ready = nullptr;
    ASSIGN_OR_RETURN(
        const models::MultipleChoiceResult result,
        multiple_choice->MultipleChoice(micro, batch, models::Backward::kYes, r.loss_scale));
    r.loss += result.loss / static_cast<double>(micro_batches);
    const std::vector<int32_t>& labels = batcher.rows().labels;
    for (int64_t q = 0; q < M; ++q) r.correct += result.predictions[q] == labels[q] ? 1 : 0;
  }
  ASSIGN_OR_RETURN(const train::StepStats stats,
                   optimizer_.Step(*sc.exec, sc.tp, /*dp=*/nullptr, r.learning_rate,
                                   static_cast<double>(micro_batches) * r.loss_scale));
  r.grad_norm = stats.grad_norm;
  r.skipped = stats.skipped;
  scaler_.Update(stats.skipped);
  if (stats.skipped) {
    ++skipped_;
  } else {
    schedule_.Advance(G);
  }
  ++steps_;
  return r;
}

absl::Status RaceFineTuner::Save(const std::string& dir, comm::ParallelContext& parallel,
                                 const models::ModelConfig& config,
                                 const std::string& model_name) const {
  train::TrainingCounters counters;
  counters.iteration = steps_;
  counters.consumed_samples = steps_ * options_.global_batch_size;
  counters.skipped_iterations = skipped_;
  counters.seed = options_.seed;
  return train::SaveTrainingState(dir, /*keep_last=*/0, parallel, config, *store_, optimizer_,
                                  scaler_, schedule_, counters, model_name);
}

}  // namespace jobs
}  // namespace mt
