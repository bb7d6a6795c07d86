// The pretraining loop shared by every model: for each iteration, accumulate gradients over this
// data-parallel rank's micro-batches, take an optimizer step (DP all-reduce, clipping, AdamW;
// skipped on a gradient overflow), advance the LR schedule by the global batch unless the step was
// skipped, log a Megatron-style line (and the same fields as JSON lines), and call a hook (for
// evaluation and checkpoints).
//
// What differs between models (their inputs, their losses, their FLOP count) is a TrainingTask:
// train/gpt_task.h and train/bert_task.h. Dropout streams: micro_step = iteration, sample_offset
// = the global index of the micro-batch's first sample, so the masks do not depend on the TP
// degree or on how the global batch is split over micro-batches and DP ranks.
//
// Every rank of the job runs Train() with the same config; collectives inside are over the
// ParallelContext's TP and DP groups.
#ifndef MT_TRAIN_TRAINER_H_
#define MT_TRAIN_TRAINER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/parallel_context.h"
#include "core/exec_context.h"
#include "nn/context.h"
#include "nn/parameter.h"
#include "train/loss_scaler.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"

namespace mt {
namespace train {

struct TrainerConfig {
  int64_t micro_batch_size = 4;
  int64_t global_batch_size = 8;
  int64_t seq_length = 128;
  int64_t train_iters = 100;
  int log_interval = 10;
  int eval_iters = 4;     // Micro-batches per evaluation (per DP rank).
  uint64_t seed = 1234;   // Dropout seed.
  bool recompute = false;
  std::string log_jsonl;  // Written by global rank 0; empty: none.
  bool quiet = false;     // No stdout lines (tests).
  // Fault injection for tests: after the backward passes of this iteration (0-based), one gradient
  // element is set to +inf, as an f16 overflow would; -1 = never.
  int64_t inject_grad_overflow_at = -1;
};

// What one micro-batch reports. `total` is the loss backward differentiates; `parts` are its named
// components (TrainingTask::loss_names), e.g. {lm} for GPT or {lm, sop} for BERT.
struct Losses {
  double total = 0;
  std::vector<double> parts;
};

struct MicroBatchResult {
  Losses losses;
  // Model FLOPs of this micro-batch (forward + backward, with recomputation if on), for the whole
  // model, not this rank's shard.
  double model_flops = 0;
};

// The model-specific part of the loop. Implementations own the model's inputs (their loaders).
class TrainingTask {
 public:
  virtual ~TrainingTask() = default;
  // Log names of Losses::parts, in order ("lm loss", "sop loss"); the first is a language-model
  // loss whose exp is reported as the perplexity.
  virtual std::vector<std::string> loss_names() const = 0;
  // Micro-batches per iteration on this DP rank.
  virtual int64_t accumulation_steps() const = 0;
  // Forward and backward (gradients accumulated into the store, d(loss_scale * total)) of the next
  // training micro-batch; nullopt once the training data is exhausted.
  virtual absl::StatusOr<std::optional<MicroBatchResult>> TrainMicroBatch(
      const nn::StepContext& sc, float loss_scale) = 0;
  // Restarts the validation stream at its first micro-batch (every evaluation scores the same
  // samples). FailedPrecondition if the task has no validation data.
  virtual absl::Status StartValidation() = 0;
  // Forward only (sc.mode is kEval) of the next validation micro-batch; nullopt when exhausted.
  virtual absl::StatusOr<std::optional<Losses>> ValidMicroBatch(const nn::StepContext& sc) = 0;
};

// One line of the training log.
struct LogRecord {
  int64_t iteration = 0;
  int64_t consumed_samples = 0;
  double ms_per_iteration = 0;
  double learning_rate = 0;
  Losses loss;  // Means over the iteration's micro-batches and DP ranks.
  double loss_scale = 1;
  double grad_norm = 0;
  int64_t skipped_iterations = 0;
  double tokens_per_second = 0;
  double tflops_per_rank = 0;
};

struct EvalResult {
  Losses loss;             // Means over the evaluation's micro-batches and DP ranks.
  double perplexity = 0;   // exp(loss.parts[0]).
};

class Trainer {
 public:
  // The store is allocated; the task runs this rank's model on this DP rank's data.
  Trainer(const TrainerConfig& config, comm::ParallelContext* parallel, const ExecContext* exec,
          TrainingTask* task, nn::ParameterStore* store, Optimizer* optimizer,
          LrSchedule* schedule, LossScaler* scaler);

  // Runs iterations [start_iteration, train_iters). Stops early (OK status, with stopped_early()
  // true) when *stop becomes true on any rank between iterations (SIGTERM). `on_iteration` is
  // called after every step with the finished iteration count (evaluation, checkpoints); an error
  // from it ends training. OutOfRange if the training data runs out.
  absl::Status Train(int64_t start_iteration, const std::atomic<bool>* stop,
                     const std::function<absl::Status(int64_t iteration)>& on_iteration);

  // Mean validation losses over eval_iters micro-batches (averaged over DP ranks), no dropout.
  // FailedPrecondition if there is no validation micro-batch.
  absl::StatusOr<EvalResult> Evaluate();

  // " | lm loss: 3.1E+00 | sop loss: ..." for these losses.
  std::string FormatLosses(const Losses& losses) const;

  const std::vector<LogRecord>& history() const { return history_; }  // One per iteration.
  int64_t consumed_samples() const { return consumed_samples_; }
  void set_consumed_samples(int64_t n) { consumed_samples_ = n; }
  int64_t skipped_iterations() const { return skipped_; }
  void set_skipped_iterations(int64_t n) { skipped_ = n; }
  bool stopped_early() const { return stopped_early_; }
  int64_t iteration() const { return iteration_; }

 private:
  // Sums `values` over the DP ranks (one all-reduce, f32).
  absl::Status DpSum(std::vector<double>* values);
  void Log(const LogRecord& r);

  TrainerConfig config_;
  comm::ParallelContext* parallel_;
  const ExecContext* exec_;
  TrainingTask* task_;
  nn::ParameterStore* store_;
  Optimizer* optimizer_;
  LrSchedule* schedule_;
  LossScaler* scaler_;
  std::vector<std::string> loss_names_;
  std::vector<LogRecord> history_;
  int64_t consumed_samples_ = 0;
  int64_t skipped_ = 0;
  int64_t iteration_ = 0;
  bool stopped_early_ = false;
};

}  // namespace train
}  // namespace mt

#endif  // MT_TRAIN_TRAINER_H_
