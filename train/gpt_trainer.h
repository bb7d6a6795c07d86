// The GPT pretraining loop: for each iteration, accumulate gradients over the micro-batches of
// this data-parallel rank, take an optimizer step (DP all-reduce, clipping, AdamW), advance the LR
// schedule by the global batch (unless the step was skipped), log a Megatron-style line (and the
// same fields as JSON lines), evaluate periodically, and checkpoint.
//
// Every rank of the job runs Train() with the same config; collectives inside are over the
// ParallelContext's TP and DP groups.
#ifndef MT_TRAIN_GPT_TRAINER_H_
#define MT_TRAIN_GPT_TRAINER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/parallel_context.h"
#include "core/exec_context.h"
#include "data/loader/loader.h"
#include "models/gpt2/gpt2.h"
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
  int eval_interval = 0;  // 0: no periodic evaluation.
  int eval_iters = 4;     // Micro-batches per evaluation (per DP rank).
  uint64_t seed = 1234;   // Dropout seed.
  bool recompute = false;
  std::string log_jsonl;  // Written by global rank 0; empty: none.
  bool quiet = false;     // No stdout lines (tests).
  // Fault injection for tests: after the backward passes of this iteration (0-based), one gradient
  // element is set to +inf, as an f16 overflow would; -1 = never.
  int64_t inject_grad_overflow_at = -1;
};

// One line of the training log.
struct LogRecord {
  int64_t iteration = 0;
  int64_t consumed_samples = 0;
  double ms_per_iteration = 0;
  double learning_rate = 0;
  double loss = 0;
  double loss_scale = 1;
  double grad_norm = 0;
  int64_t skipped_iterations = 0;
  double tokens_per_second = 0;
  double tflops_per_gpu = 0;
};

struct EvalResult {
  double loss = 0;
  double perplexity = 0;
};

class GptTrainer {
 public:
  // model/store are this rank's (store allocated). The loaders yield this DP rank's micro-batches
  // (valid may be null).
  GptTrainer(const TrainerConfig& config, comm::ParallelContext* parallel, const ExecContext* exec,
             models::GptModel* model, nn::ParameterStore* store, Optimizer* optimizer,
             LrSchedule* schedule, LossScaler* scaler);

  // Runs iterations [start_iteration, train_iters) from `train`. Stops early (OK status, with
  // stopped_early() true) when *stop becomes true between iterations (SIGTERM). `on_iteration` is
  // called after every step with the finished iteration count (for checkpointing); an error from it
  // ends training.
  absl::Status Train(data::Loader* train, data::Loader* valid, int64_t start_iteration,
                     const std::atomic<bool>* stop,
                     const std::function<absl::Status(int64_t iteration)>& on_iteration);

  // Mean validation loss over eval_iters micro-batches (averaged over DP ranks).
  absl::StatusOr<EvalResult> Evaluate(data::Loader* valid);

  const std::vector<LogRecord>& history() const { return history_; }  // One per iteration.
  int64_t consumed_samples() const { return consumed_samples_; }
  void set_consumed_samples(int64_t n) { consumed_samples_ = n; }
  int64_t skipped_iterations() const { return skipped_; }
  void set_skipped_iterations(int64_t n) { skipped_ = n; }
  bool stopped_early() const { return stopped_early_; }
  int64_t iteration() const { return iteration_; }

 private:
  absl::StatusOr<double> DpMean(double v);
  void Log(const LogRecord& r, const std::string& eval_suffix);

  TrainerConfig config_;
  comm::ParallelContext* parallel_;
  const ExecContext* exec_;
  models::GptModel* model_;
  nn::ParameterStore* store_;
  Optimizer* optimizer_;
  LrSchedule* schedule_;
  LossScaler* scaler_;
  std::vector<LogRecord> history_;
  int64_t consumed_samples_ = 0;
  int64_t skipped_ = 0;
  int64_t iteration_ = 0;
  bool stopped_early_ = false;
};

}  // namespace train
}  // namespace mt

#endif  // MT_TRAIN_GPT_TRAINER_H_
