// The BERT pretraining loop, as GptTrainer (gpt_trainer.h): for each iteration, accumulate the
// gradients of the MLM + SOP loss over this data-parallel rank's micro-batches, take an optimizer
// step (DP all-reduce, clipping, AdamW; skipped on a gradient overflow), advance the LR schedule
// by the global batch unless the step was skipped, log a Megatron-style line with "lm loss" and
// "sop loss" (and the same fields as JSON lines), evaluate periodically, and call a hook (for
// checkpoints). Dropout streams: micro_step = iteration, sample_offset = the global index (within
// the global batch's samples) of the micro-batch's first row, so the masks do not depend on the
// TP degree or on how the global batch is split over micro-batches and DP ranks.
//
// Every rank of the job runs Train() with the same config; collectives are over the
// ParallelContext's TP and DP groups.
#ifndef MT_TRAIN_BERT_TRAINER_H_
#define MT_TRAIN_BERT_TRAINER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/parallel_context.h"
#include "core/exec_context.h"
#include "data/loader/bert_loader.h"
#include "models/bert/bert.h"
#include "nn/parameter.h"
#include "train/gpt_trainer.h"  // TrainerConfig, LogRecord.
#include "train/loss_scaler.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"

namespace mt {
namespace train {

// LogRecord::loss is the total (lm + sop) loss.
struct BertLogRecord : LogRecord {
  double lm_loss = 0;
  double sop_loss = 0;
};

struct BertEvalResult {
  double loss = 0;     // lm + sop
  double lm_loss = 0;
  double sop_loss = 0;
  double lm_perplexity = 0;  // exp(lm_loss)
};

class BertTrainer {
 public:
  // model/store are this rank's (store allocated, model with pretraining heads). TrainerConfig's
  // fields mean what they mean for GptTrainer (seq_length: the BERT sample length).
  BertTrainer(const TrainerConfig& config, comm::ParallelContext* parallel, const ExecContext* exec,
              models::BertModel* model, nn::ParameterStore* store, Optimizer* optimizer,
              LrSchedule* schedule, LossScaler* scaler);

  // Runs iterations [start_iteration, train_iters) from `train`. Stops early (OK, stopped_early()
  // true) when *stop becomes true between iterations. `on_iteration` is called after every step
  // with the finished iteration count; an error from it ends training. OutOfRange if `train` runs
  // out of data; the model's errors (e.g. a micro-batch without a masked token) are returned.
  absl::Status Train(data::BertLoader* train, data::BertLoader* valid, int64_t start_iteration,
                     const std::atomic<bool>* stop,
                     const std::function<absl::Status(int64_t iteration)>& on_iteration);

  // Mean validation losses over eval_iters micro-batches (averaged over DP ranks), no dropout.
  // FailedPrecondition if `valid` yields no micro-batch.
  absl::StatusOr<BertEvalResult> Evaluate(data::BertLoader* valid);

  const std::vector<BertLogRecord>& history() const { return history_; }  // One per iteration.
  int64_t consumed_samples() const { return consumed_samples_; }
  void set_consumed_samples(int64_t n) { consumed_samples_ = n; }
  int64_t skipped_iterations() const { return skipped_; }
  void set_skipped_iterations(int64_t n) { skipped_ = n; }
  bool stopped_early() const { return stopped_early_; }
  int64_t iteration() const { return iteration_; }

 private:
  // Means over the DP ranks of the three values (one all-reduce).
  absl::Status DpMean(double* a, double* b, double* c);
  void Log(const BertLogRecord& r, const std::string& eval_suffix);

  TrainerConfig config_;
  comm::ParallelContext* parallel_;
  const ExecContext* exec_;
  models::BertModel* model_;
  nn::ParameterStore* store_;
  Optimizer* optimizer_;
  LrSchedule* schedule_;
  LossScaler* scaler_;
  std::vector<BertLogRecord> history_;
  int64_t consumed_samples_ = 0;
  int64_t skipped_ = 0;
  int64_t iteration_ = 0;
  bool stopped_early_ = false;
};

}  // namespace train
}  // namespace mt

#endif  // MT_TRAIN_BERT_TRAINER_H_
