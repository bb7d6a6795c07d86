// RACE (Megatron-LM's tasks/race): fine-tune a pretrained BERT checkpoint on the RACE training
// questions and score the dev and test sets, or (--eval_only) score a fine-tuned checkpoint.
//
// Model: the checkpoint's BERT built with the multiple-choice head (models::Heads::
// kMultipleChoice): encoder -> pooler ([CLS]) -> dropout -> Linear(hidden -> 1), one score per
// option, cross-entropy over each question's 4 scores. Fine-tuning loads every encoder and pooler
// parameter, initialises the new head from --seed and ignores the pretraining heads (MLM, SOP);
// --eval_only needs every parameter (a checkpoint this task saved with --save).
// Inputs (eval/race.h): per option, [CLS] question+option [SEP] article [SEP] cut / padded to
// --seq_length tokens, bert-base-uncased WordPiece (--vocab_file: another vocab.txt).
//
// Fine-tuning (jobs/eval/race_finetune.h): --epochs passes over RACE/train/{middle,high}, shuffled
// per epoch by (--seed, epoch); steps of --global_batch_size questions (the incomplete last batch
// of an epoch is dropped, as Megatron's loader does), micro-batches of --micro_batch_size
// questions; AdamW (--weight_decay, --clip_grad), --lr with linear warmup over --lr_warmup_fraction
// of the run and linear decay to 0. After each epoch, dev and test are scored in eval mode.
//
// Output (rank 0, stdout): progress lines with an ETA; every --log_interval steps a line
//   "race: step 10/30 (epoch 1) | choice loss 1.38E+00 | train accuracy 0.2812 | ..."
// after each epoch one JSON line
//   {"epoch": e, "steps": s, "train": {"questions", "correct", "accuracy", "loss"},
//    "splits": {...}, "overall": {...}}
// and last the results object (also --results_json):
//   {"task": "race", "splits": {"dev/middle": {"questions": n, "correct": c, "accuracy": c / n,
//    "loss": mean cross-entropy}, "dev/high", "test/middle", "test/high", "dev", "test"},
//    "overall": {... every scored question}, "epochs", "steps", "seq_length", "model"
//    [, "train": the last epoch's]}.
// The scores are those of the last evaluation (eval mode, no dropout); "train" counts the
// training-mode predictions of the epoch's steps. --per_example_jsonl: one line per question of
// the last evaluation {"split", "level", "file", "question" (index in the file), "answer",
// "predicted", "correct"}; --log_jsonl: one line per step {"step", "epoch", "loss", "questions",
// "correct", "learning_rate", "grad_norm", "loss_scale", "skipped"}. --save writes the
// fine-tuned model (and its optimizer state) as a training checkpoint, iteration = the steps.
#ifndef MT_JOBS_EVAL_RACE_TASK_H_
#define MT_JOBS_EVAL_RACE_TASK_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/model_loading.h"
#include "data/tokenizers/tokenizer.h"
#include "eval/harness.h"
#include "eval/race.h"
#include "eval/race_batches.h"
#include "jobs/eval/race_finetune.h"

namespace mt {
namespace jobs {

struct RaceConfig {
  eval::HarnessConfig harness;  // micro_batch_size counts questions; vocab_file is a vocab.txt.
  std::string data;             // The RACE directory: {train,dev,test}/{middle,high}/*.txt.
  int64_t seq_length = 0;       // 0: min(512, the model's max_position_embeddings).
  int64_t max_qa_length = 128;
  std::string readout = "pooled";  // eval::ParseRaceReadout's names.
  int epochs = 3;
  int64_t global_batch_size = 32;  // Questions per optimizer step.
  double lr = 2e-5;
  double lr_warmup_fraction = 0.06;
  double weight_decay = 0.1;
  double clip_grad = 1.0;
  uint64_t seed = 1234;    // The new head's initial values, the data order, dropout.
  std::string save;        // Write the fine-tuned checkpoint here.
  bool eval_only = false;  // Score --load (a fine-tuned checkpoint) without training.
  int log_interval = 10;   // Steps between training log lines.
  std::string log_jsonl;   // One JSON line per training step.

  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    eval::HarnessConfig::Fields(self.harness, v);
    v("data", &self.data, "The RACE directory ({train,dev,test}/{middle,high}/*.txt).");
    v("seq_length", &self.seq_length,
      "Tokens per option sequence (0: 512 or the model's max_position_embeddings if fewer).");
    v("max_qa_length", &self.max_qa_length, "Question + option tokens kept.");
    v("readout", &self.readout,
      "pooled: the pooled [CLS] through a new choice head (Megatron's RACE); masked: each "
      "option's word pieces masked at the question's blank \"_\" and scored by the checkpoint's "
      "masked-LM head (mean log-probability; cloze questions only, no new head).");
    v("epochs", &self.epochs, "Passes over the training questions.");
    v("global_batch_size", &self.global_batch_size,
      "Questions per optimizer step (a multiple of --micro_batch_size).");
    v("lr", &self.lr, "Peak learning rate (Megatron's RACE: 2e-5 at batch 32 for 336M).");
    v("lr_warmup_fraction", &self.lr_warmup_fraction,
      "Fraction of the run's questions with a linear warmup (then linear decay to 0).");
    v("weight_decay", &self.weight_decay, "AdamW's decoupled weight decay.");
    v("clip_grad", &self.clip_grad, "Global gradient-norm clipping (<= 0: none).");
    v("seed", &self.seed, "Seed of the new head's initial values, the data order and dropout.");
    v("save", &self.save, "Write the fine-tuned checkpoint to this (new) directory.");
    v("eval_only", &self.eval_only,
      "Only score dev and test with --load, a fine-tuned checkpoint (see --save).");
    v("log_interval", &self.log_interval, "Training steps between log lines.");
    v("log_jsonl", &self.log_jsonl, "Write one JSON line per training step to this file.");
  }

  // HarnessConfig::Validate (but for its GPT-2 --vocab_file / --merge_file pairing: RACE takes a
  // vocab.txt alone), plus (InvalidArgument naming the flag): --data given, no --merge_file,
  // seq_length >= 0, max_qa_length >= 1, a known readout, epochs >= 1, global_batch_size a positive
  // multiple of micro_batch_size, lr >= 0, lr_warmup_fraction in [0, 1], log_interval >= 1, and no
  // --save with --eval_only (nothing would be trained to save).
  absl::Status Validate() const;
};

class RaceTask : public eval::EvalTask {
 public:
  explicit RaceTask(const RaceConfig& config) : config_(config) {}

  // FailedPrecondition for a checkpoint that is not a BERT-family model with 2 or more token
  // types and the tokenizer's vocabulary size, or for a --save directory that already holds a
  // checkpoint; InvalidArgument for a seq_length above the model's positions, or fewer training
  // questions than a global batch; NotFound / InvalidArgument from reading RACE (naming the
  // directory, or the file and key); the tokenizer's and JsonlWriter::Open's errors.
  absl::Status Prepare(const checkpoint::CheckpointModel& checkpoint, bool rank0) override;
  // The multiple-choice head only; parameters may be missing or unused (Loaded checks them).
  checkpoint::LoadModelOptions LoadOptions() const override;
  // FailedPrecondition when a parameter other than the new head's was missing (for --eval_only:
  // any), naming them; then the optimizer state (RaceFineTuner::Create's errors).
  absl::Status Loaded(eval::Harness& harness) override;
  absl::StatusOr<eval::Json> Run(eval::Harness& harness) override;

 private:
  // One scored split and level: counts and the summed cross-entropy.
  struct GroupScore {
    int64_t questions = 0, correct = 0;
    double loss_sum = 0;
  };
  struct Evaluation {
    eval::RaceScores scores;
    std::map<std::string, double> loss_sums;  // By RaceScore::name of the groups.
  };
  struct EpochStats {
    int64_t questions = 0, correct = 0;
    double loss_sum = 0;  // Of the steps' mean losses.
    int64_t steps = 0;
  };

  // One epoch of fine-tuning (collective).
  absl::StatusOr<EpochStats> TrainEpoch(eval::Harness& harness, int epoch,
                                        eval::ProgressMeter& progress);
  // Scores dev and test (collective); `per_example`: write their lines (rank 0).
  absl::StatusOr<Evaluation> Evaluate(eval::Harness& harness, bool per_example);
  absl::StatusOr<GroupScore> ScoreGroup(eval::Harness& harness, int32_t group, bool per_example,
                                        eval::ProgressMeter& progress, int64_t* done);
  // Rank 0's training log: the line every log_interval steps and the JSONL record.
  absl::Status LogStep(const RaceStep& step, int64_t step_index, int epoch, double seconds);
  void PrintSummary(const eval::Harness& harness) const;

  RaceConfig config_;
  std::unique_ptr<data::Tokenizer> tokenizer_;
  eval::RaceLayoutOptions layout_;
  std::vector<eval::RaceGroup> train_;  // Empty with --eval_only.
  std::vector<eval::RaceGroup> eval_;   // dev/middle, dev/high, test/middle, test/high.
  std::vector<eval::RaceQuestionRef> train_questions_;
  int64_t steps_per_epoch_ = 0;
  std::unique_ptr<eval::RaceBatcher> batcher_;
  std::unique_ptr<RaceFineTuner> tuner_;
  std::unique_ptr<eval::JsonlWriter> per_example_, log_;
  std::string model_name_;
  EpochStats interval_;  // Steps since the last log line.
  double interval_seconds_ = 0;
};

}  // namespace jobs
}  // namespace mt

#endif  // MT_JOBS_EVAL_RACE_TASK_H_
