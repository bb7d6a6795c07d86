// Fine-tuning a multiple-choice BERT on RACE questions (Megatron-LM's tasks/race recipe), one
// optimizer step at a time, with the training library's parts: train::Optimizer (AdamW with
// decoupled weight decay, gradient clipping, inf/NaN skipping), train::LrSchedule (linear warmup
// over a fraction of the steps, then linear decay to zero, counted in questions) and
// train::LossScaler (dynamic for f16, else 1).
//
// A step takes global_batch_size questions in micro-batches of micro_batch_size (each question is
// 4 sequences): for each, the model's MultipleChoice (models::MultipleChoiceModel) in training mode
// accumulates loss_scale x d(mean loss of the micro-batch)/d(params); the optimizer then divides
// by micro-batches x loss_scale (so the gradient is that of the step's mean loss) and updates.
// Dropout masks: seed = options.seed, micro_step = the step, sample_offset = the first row (=
// 4 x question) of the micro-batch within the step, so they do not depend on the TP degree.
//
// Every rank of the TP group calls every method with the same arguments (collective over the
// group); the parameters stay replicated / sharded as the store holds them.
#ifndef MT_JOBS_EVAL_RACE_FINETUNE_H_
#define MT_JOBS_EVAL_RACE_FINETUNE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "comm/parallel_context.h"
#include "core/dtype.h"
#include "eval/race.h"
#include "eval/race_batches.h"
#include "models/config.h"
#include "models/model.h"
#include "models/multiple_choice.h"
#include "nn/context.h"
#include "nn/parameter.h"
#include "train/loss_scaler.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"

namespace mt {
namespace jobs {

struct RaceTrainingOptions {
  int64_t micro_batch_size = 4;    // Questions per forward pass.
  int64_t global_batch_size = 32;  // Questions per optimizer step (a multiple of the above).
  int64_t total_steps = 1;         // Steps of the whole run (the LR schedule's length).
  double lr = 2e-5;                // Peak learning rate.
  double warmup_fraction = 0.06;   // Of the run's questions, with a linear warmup.
  double weight_decay = 0.1;
  double clip_grad = 1.0;             // Global gradient norm; <= 0: no clipping.
  uint64_t seed = 1234;               // Dropout.
  DType compute_dtype = DType::kF32;  // f16: dynamic loss scaling.
};

// What one step did (on every rank).
struct RaceStep {
  double loss = 0;        // Mean cross-entropy over the step's questions (with dropout).
  int64_t questions = 0;  // global_batch_size.
  int64_t correct = 0;    // Questions whose training-mode prediction was right.
  double learning_rate = 0;
  double grad_norm = 0;   // Before clipping (NaN / inf when the step was skipped).
  double loss_scale = 1;  // The scale the step used.
  bool skipped = false;   // inf / NaN gradients: the parameters did not change.
};

class RaceFineTuner {
 public:
  // The optimizer's moments for `store` (allocated; the model's store, outliving the tuner), the
  // schedule and the scaler. InvalidArgument for batch sizes < 1 or a global batch that is not a
  // multiple of the micro-batch, total_steps < 1, lr < 0, a warmup fraction outside [0, 1];
  // the optimizer's errors (allocation).
  static absl::StatusOr<std::unique_ptr<RaceFineTuner>> Create(nn::ParameterStore* store,
                                                               const RaceTrainingOptions& options);

  // One optimizer step over `questions` (global_batch_size references into `groups`), laid out
  // by `batcher`. sc: the TP group's exec and communicator (its mode, seed and offsets are set
  // here). Errors: Unimplemented for a model without the multiple-choice capability
  // (models::MultipleChoiceOf); the layout's, the model's and the optimizer's.
  absl::StatusOr<RaceStep> Step(models::Model& model, const nn::StepContext& sc,
                                eval::RaceBatcher& batcher,
                                absl::Span<const eval::RaceGroup> groups,
                                absl::Span<const eval::RaceQuestionRef> questions);

  // Collective over the world: the parameters and optimizer state after steps() steps as a
  // training checkpoint (train/training_state.h) in `dir`, iteration = steps(), keeping any
  // other iteration there. model_name: what the checkpoint it started from recorded.
  absl::Status Save(const std::string& dir, comm::ParallelContext& parallel,
                    const models::ModelConfig& config, const std::string& model_name) const;

  int64_t steps() const { return steps_; }
  int64_t skipped_steps() const { return skipped_; }

 private:
  RaceFineTuner(nn::ParameterStore* store, const RaceTrainingOptions& options,
                train::Optimizer optimizer);

  nn::ParameterStore* store_;
  RaceTrainingOptions options_;
  train::Optimizer optimizer_;
  train::LrSchedule schedule_;
  train::LossScaler scaler_;
  int64_t steps_ = 0, skipped_ = 0;
};

}  // namespace jobs
}  // namespace mt

#endif  // MT_JOBS_EVAL_RACE_FINETUNE_H_
