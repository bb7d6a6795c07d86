// The pretraining loop shared by every model: for each iteration, accumulate gradients over this
// data-parallel rank's micro-batches (models::Model::ForwardBackward), take an optimizer step (DP
// all-reduce, clipping, AdamW; skipped on a gradient overflow), advance the LR schedule by the
// global batch unless the step was skipped, log a Megatron-style line (and the same fields as JSON
// lines), and call a hook (for evaluation and checkpoints).
//
// The model (models/model.h) brings its losses and FLOP count; the data comes as a BatchStream
// (train/batches.h adapts the GPT and BERT loaders). Dropout streams: micro_step = iteration,
// sample_offset = the global index of the micro-batch's first sample, so the masks do not depend
// on the TP degree or on how the global batch is split over micro-batches and DP ranks.
//
// Every rank of the job runs Train() with the same config; collectives inside are over the
// ParallelContext's TP and DP groups, and with pipeline parallelism (PP > 1) its pipeline and
// embedding groups: each iteration runs the 1F1B schedule (train/pipeline_schedule.h; interleaved
// with several model chunks per stage), the tied word embedding's gradient is summed over the
// first and last stage, and the losses (computed on the last stage), the FLOPs and the gradient
// norm are summed over the stages, so every rank logs, clips and skips alike.
#ifndef MT_TRAIN_TRAINER_H_
#define MT_TRAIN_TRAINER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "comm/parallel_context.h"
#include "core/exec_context.h"
#include "models/model.h"
#include "nn/context.h"
#include "nn/parameter.h"
#include "train/loss_scaler.h"
#include "train/lr_schedule.h"
#include "train/metrics_log.h"
#include "train/optimizer.h"
#include "train/pipeline_schedule.h"
#include "train/tensorboard.h"
#include "train/timers.h"

namespace mt {
namespace train {

// What the run reports besides its log line (Megatron-LM's flags): TensorBoard event files,
// the timers (train/timers.h), the straggler report, and the gradient's zeros and the weights'
// norm (also in the log line and the JSON lines).
struct LoggingConfig {
  std::string tensorboard_dir;  // Written by the last rank; empty: none.
  int tensorboard_log_interval = 1;
  bool log_timers_to_tensorboard = false;
  bool log_validation_ppl_to_tensorboard = false;
  bool log_memory_to_tensorboard = false;
  bool log_num_zeros_in_grad = false;
  bool log_params_norm = false;
  int timing_log_level = 0;
  TimingLogOption timing_log_option = TimingLogOption::kMinMax;
  bool log_straggler = false;
  double straggler_threshold = 0.2;

  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    v("tensorboard_dir", &self.tensorboard_dir,
      "Write TensorBoard event files here (by the last rank), with Megatron's tags.");
    v("tensorboard_log_interval", &self.tensorboard_log_interval,
      "Iterations between the TensorBoard scalars of the training step.");
    v("log_timers_to_tensorboard", &self.log_timers_to_tensorboard,
      "Also write iteration-time and every timer's <name>-time (seconds per iteration, the "
      "maximum over the ranks) at each log line.");
    v("log_validation_ppl_to_tensorboard", &self.log_validation_ppl_to_tensorboard,
      "Also write '<loss> validation ppl' for every evaluation.");
    v("log_memory_to_tensorboard", &self.log_memory_to_tensorboard,
      "Also write this process's resident and peak resident bytes (and, on a GPU, the device "
      "bytes in use).");
    v("log_num_zeros_in_grad", &self.log_num_zeros_in_grad,
      "Count the gradient elements that are exactly zero (log line, JSON lines, TensorBoard).");
    v("log_params_norm", &self.log_params_norm,
      "Log the L2 norm of the weights after each step (log line, JSON lines, TensorBoard).");
    v("timing_log_level", &self.timing_log_level,
      "Timers printed at each log line, min/max over the ranks: 0 none, 1 forward-backward, the "
      "gradient reductions and the optimizer's parts, 2 also forward/backward compute, the batch "
      "wait and the pipeline's sends and receives (synchronises a GPU at every timer).");
    v("timing_log_option", &self.timing_log_option,
      "How timers are printed: minmax, max or all (every rank).", kTimingLogOptionNames);
    v("log_straggler", &self.log_straggler,
      "At each log line, print every rank's busy time per iteration (outside communication) and "
      "name the slowest rank when it exceeds the median by --straggler_threshold.");
    v("straggler_threshold", &self.straggler_threshold,
      "The fraction over the median busy time that makes a rank a straggler.");
  }
  // InvalidArgument naming the flag.
  absl::Status Validate() const;
};

struct TrainerConfig {
  int64_t micro_batch_size = 4;
  int64_t global_batch_size = 8;
  int64_t seq_length = 128;
  int64_t train_iters = 100;
  int log_interval = 10;
  int eval_iters = 4;    // Micro-batches per evaluation (per DP rank).
  uint64_t seed = 1234;  // Initialisation, data order and dropout.
  bool recompute = false;
  std::string log_jsonl;  // Written by global rank 0; empty: none.
  bool quiet = false;     // No stdout lines (tests).
  // Without dynamic loss scaling (f32, bf16), a step whose loss or gradient norm is not finite is
  // skipped, and this many such steps in a row stop training with an Aborted error naming the
  // iterations (0: never stop). With f16 skipped steps are the loss scaler's (not counted).
  int max_nan_skips = 3;
  LoggingConfig logging;

  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    v("micro_batch_size", &self.micro_batch_size,
      "Samples per micro-batch per data-parallel rank.");
    v("global_batch_size", &self.global_batch_size, "Samples per optimizer step over all ranks.");
    v("seq_length", &self.seq_length, "Tokens per sample.");
    v("train_iters", &self.train_iters, "Optimizer steps.");
    v("log_interval", &self.log_interval, "Iterations between log lines.");
    v("eval_iters", &self.eval_iters, "Validation micro-batches per evaluation.");
    v("seed", &self.seed, "Seed for initialisation, data order and dropout.");
    v("recompute", &self.recompute, "Activation checkpointing: recompute each layer in backward.");
    v("log_jsonl", &self.log_jsonl, "Append the log lines as JSON objects to this file.");
    v("max_nan_skips", &self.max_nan_skips,
      "f32/bf16: stop after this many consecutive steps with a non-finite loss or gradient norm "
      "(each skipped; 0: never stop).");
    LoggingConfig::Fields(self.logging, v);
  }
};

struct TrainingParts;

// A test's hook into every training step: a fault production never has, as an object the test
// passes in (TrainingParts::hooks; train/testing/fault_hooks.h has the project's), never a flag
// or a config field. Production jobs pass none.
class TrainerHooks {
 public:
  virtual ~TrainerHooks() = default;
  // Called on every rank after the backward passes and gradient reduction of iteration
  // `iteration` (0-based), before the loss is averaged over the data-parallel ranks and the
  // optimizer steps. `loss`: this rank's loss of the iteration, as it will be averaged and
  // logged; the gradients are parts.store->flat_grads(). An error ends training.
  virtual absl::Status AfterBackward(int64_t iteration, const TrainingParts& parts,
                                     models::Losses* loss) = 0;
};

// One data-parallel rank's micro-batches (train/batches.h adapts the data loaders).
class BatchStream {
 public:
  virtual ~BatchStream() = default;
  // Micro-batches per iteration on this DP rank.
  virtual int64_t accumulation_steps() const = 0;
  // The next micro-batch (views valid until the next call), or nullopt once exhausted.
  virtual std::optional<models::Batch> Next() = 0;
};

// The step context of this DP rank's micro-batch `micro` (from 0) in an iteration that starts once
// `consumed_samples` samples (all ranks) are done: dropout micro_step = iteration and sample_offset
// = the global index of the micro-batch's first sample as the loaders lay samples out
// (data/loader/loader.h: micro-step after micro-step, DP rank r taking the r-th micro_batch_size
// slice of each).
// With context parallelism the step carries the CP group (StepContext::cp).
nn::StepContext TrainingMicroStep(const ExecContext* exec, const comm::ParallelContext& parallel,
                                  uint64_t seed, int64_t iteration, int64_t consumed_samples,
                                  int64_t micro_batch_size, int64_t micro);

// The group the gradients are summed over: DP x CP (comm::ParallelContext::dp_cp(), the DP group
// at CP = 1), or null when it is this rank alone.
comm::Communicator* GradGroup(const comm::ParallelContext& parallel);

// One line of the training log.
struct LogRecord {
  int64_t iteration = 0;
  int64_t consumed_samples = 0;
  double ms_per_iteration = 0;
  double learning_rate = 0;
  models::Losses loss;  // Means over the iteration's micro-batches and DP ranks.
  double loss_scale = 1;
  double grad_norm = 0;
  int64_t skipped_iterations = 0;
  double tokens_per_second = 0;
  double tflops_per_rank = 0;
  int64_t num_zeros = -1;   // With --log_num_zeros_in_grad.
  double params_norm = -1;  // With --log_params_norm.
};

struct EvalResult {
  models::Losses loss;    // Means over the evaluation's micro-batches and DP ranks.
  double perplexity = 0;  // exp(loss.parts[0]).
};

// What the trainer drives; all owned by the caller and outliving the Trainer. The store is
// allocated, the model declared in it, and the optimizer made for it.
struct TrainingParts {
  comm::ParallelContext* parallel = nullptr;
  const ExecContext* exec = nullptr;
  models::Model* model = nullptr;
  nn::ParameterStore* store = nullptr;
  Optimizer* optimizer = nullptr;
  LrSchedule* schedule = nullptr;
  LossScaler* scaler = nullptr;
  // With PP > 1: this stage's model chunks in chunk order (models::CreateStageModels), all in
  // `store`; empty: {model}. `model` must be one of them (its loss names are logged).
  std::vector<models::Model*> chunks;
  // With PP > 1: more instances of a chunk, one per micro-batch in flight (StageChunkFactory);
  // null: the pipeline recomputes forwards at the stage boundary (train/pipeline_schedule.h).
  ChunkFactory more_chunks;
  TrainerHooks* hooks = nullptr;  // Tests only (TrainerHooks); may be null.
};

// Pipeline time of this rank over the iterations trained so far (PP > 1).
struct PipelineTotals {
  int64_t iterations = 0;
  double seconds = 0;       // In the schedule (forward and backward passes with their messages).
  double wait_seconds = 0;  // Of which waiting for other stages: the bubble (and message time).
  int64_t recomputed = 0;   // Forwards run again at the stage boundary.
  int64_t instances = 0;    // Chunk instances (activation sets) this stage holds.
};

class Trainer {
 public:
  // Opens config.log_jsonl for appending on global rank 0 (an error names the file).
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const TrainerConfig& config,
                                                         const TrainingParts& parts);
  // Takes the trainer's timers back from the optimizer (which outlives it).
  ~Trainer();

  // Runs iterations [start_iteration, train_iters) on `data`. Stops early (OK status, with
  // stopped_early() true) when *stop becomes true on any rank between iterations (SIGTERM).
  // `on_iteration` is called after every step with the finished iteration count (evaluation,
  // checkpoints); an error from it ends training. OutOfRange if the training data runs out;
  // DataLoss if a JSONL line cannot be written.
  absl::Status Train(BatchStream& data, int64_t start_iteration, const std::atomic<bool>* stop,
                     const std::function<absl::Status(int64_t iteration)>& on_iteration);

  // Mean validation losses over eval_iters micro-batches of `valid` (averaged over DP ranks), no
  // dropout. FailedPrecondition if `valid` has no micro-batch.
  absl::StatusOr<EvalResult> Evaluate(BatchStream& valid);

  // Writes an evaluation's TensorBoard scalars at the current iteration (with --tensorboard_dir,
  // on the last rank; Megatron's "<loss> validation", "<loss> validation ppl" and their "vs
  // samples" twins). DataLoss if the event file cannot be written.
  absl::Status LogValidation(const EvalResult& e);

  // " | lm loss: 3.1E+00 | sop loss: ..." for these losses.
  std::string FormatLosses(const models::Losses& losses) const;

  const std::vector<LogRecord>& history() const { return history_; }  // One per iteration.
  int64_t consumed_samples() const { return consumed_samples_; }
  void set_consumed_samples(int64_t n) { consumed_samples_ = n; }
  int64_t skipped_iterations() const { return skipped_; }
  void set_skipped_iterations(int64_t n) { skipped_ = n; }
  bool stopped_early() const { return stopped_early_; }
  int64_t iteration() const { return iteration_; }
  const PipelineTotals& pipeline_totals() const { return pipeline_totals_; }

 private:
  Trainer(const TrainerConfig& config, const TrainingParts& parts);
  // The StepContext of micro-batch `micro` of the current iteration.
  nn::StepContext MicroStep(int64_t micro) const;
  // This rank's share of one iteration: the mean losses of its micro-batches and their FLOPs.
  struct Accumulated {
    models::Losses loss;
    double flops = 0;
  };
  // Forward and backward of every micro-batch of one iteration.
  absl::StatusOr<Accumulated> AccumulateGradients(BatchStream& data);
  // The same through the pipeline schedule (PP > 1); losses are sums over the stages.
  absl::StatusOr<Accumulated> AccumulatePipelined(BatchStream& data);
  // The next n micro-batches of `data`, copied (OutOfRange naming the iteration when exhausted;
  // fewer than n only with `partial`).
  absl::StatusOr<std::vector<OwnedBatch>> TakeBatches(BatchStream& data, int64_t n, bool partial);
  // Builds the pipeline runner and tells the optimizer about the stages (PP > 1).
  absl::Status SetUpPipeline();
  // Evaluation through the pipeline: the sums of the losses of up to eval_iters micro-batches
  // (on the last stage; zero elsewhere) and their number.
  absl::StatusOr<std::pair<models::Losses, int>> PipelinedEvalSums(BatchStream& valid);
  // Sums the losses and FLOPs over the pipeline stages, and the total and parts each stage
  // reports for its own layers (Model::output_stage_parts); one all-reduce, a no-op without PP.
  absl::Status PpSum(models::Losses* losses, double* flops);
  // Sums `values` over the DP ranks (one all-reduce, f32).
  absl::Status DpSum(std::vector<double>* values);
  // Means over the DP ranks of per-rank losses and the total FLOPs.
  absl::Status DpMean(models::Losses* losses, double* flops);
  // The optimizer step of an iteration of `accumulation` micro-batches per DP rank with the mean
  // losses `loss` (skipped when they are not finite), then the loss scaler and the schedule.
  absl::StatusOr<StepStats> OptimizerStep(const models::Losses& loss, double accumulation);
  // Counts a skipped step without loss scaling; Aborted after max_nan_skips in a row.
  absl::Status CheckNonfinite(const StepStats& stats, const models::Losses& loss);
  absl::Status Log(const LogRecord& r);
  // The timers' and the straggler report of the log interval that just ended (collective over the
  // world when either is on), then a fresh interval.
  absl::Status ReportTimings();
  // The TensorBoard scalars of one iteration's record (at every tensorboard_log_interval).
  absl::Status WriteTensorBoard(const LogRecord& r);
  // `value` at step iteration_ as `tag`, and at consumed_samples_ as "<tag> vs samples".
  absl::Status AddScalarPair(const std::string& tag, double value);
  // Seconds this rank has spent in communicator calls (comm::CallMonitor of the world; 0 without
  // one).
  double CommSeconds() const;
  // Megatron's memory report, one line per rank of DP rank 0, before training (`when` "before
  // training": the model and optimizer state, no activations yet) and after the first logged
  // iteration ("after N iterations"): "[Rank R] (WHEN) memory (MB) | resident: X | max resident:
  // Y" (this process's resident set now and at its peak) and, on a GPU, "| device in use: Z".
  // Not when quiet; a failed reading is a warning.
  void ReportMemory(const std::string& when) const;

  TrainerConfig config_;
  TrainingParts parts_;
  std::vector<std::string> loss_names_;
  int output_stage_parts_;                    // The model's Model::output_stage_parts().
  std::unique_ptr<JsonlWriter> jsonl_;        // Global rank 0 with log_jsonl set.
  std::unique_ptr<PipelineRunner> pipeline_;  // PP > 1.
  std::unique_ptr<Timers> timers_;
  std::unique_ptr<EventFileWriter> tensorboard_;  // The last rank with --tensorboard_dir.
  // The totals of the current log interval for the timers and the straggler report.
  double interval_step_ms_ = 0, interval_comm_ms_ = 0;
  int interval_steps_ = 0;
  int tied_handle_ = -1;  // This stage's copy of the tied embedding, or -1.
  PipelineTotals pipeline_totals_;
  std::vector<LogRecord> history_;
  int64_t consumed_samples_ = 0;
  int64_t skipped_ = 0;
  int64_t nonfinite_in_a_row_ = 0;  // Skipped steps in a row without loss scaling.
  int64_t iteration_ = 0;
  bool stopped_early_ = false;
  bool memory_reported_ = false;
};

}  // namespace train
}  // namespace mt

#endif  // MT_TRAIN_TRAINER_H_
