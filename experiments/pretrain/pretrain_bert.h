// The BERT pretraining job as a library function (Megatron-LM's pretrain_bert): builds the
// parallel layout, BERT samples (sentence pairs, sentence-order prediction, whole-word masking)
// over a sentence-level indexed dataset, the model with MLM + SOP heads, optimizer and schedule
// from a typed config, resumes from a checkpoint, trains, evaluates and saves.
#ifndef MT_EXPERIMENTS_PRETRAIN_PRETRAIN_BERT_H_
#define MT_EXPERIMENTS_PRETRAIN_PRETRAIN_BERT_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/dtype.h"
#include "models/config.h"
#include "train/gpt_trainer.h"
#include "train/lr_schedule.h"

namespace mt {
namespace experiments {

struct PretrainBertConfig {
  models::ModelConfig model;  // family kBert, num_token_types >= 1.
  train::TrainerConfig trainer;
  train::LrScheduleConfig lr;
  double weight_decay = 0.01;
  double clip_grad = 1.0;
  int tensor_model_parallel_size = 1;
  // As PretrainGptConfig: f32, bf16 (loss scale 1) or f16 (dynamic loss scaling from 2^32).
  DType compute_dtype = DType::kF32;
  double mask_prob = 0.15;       // Fraction of tokens masked for the MLM loss.
  double short_seq_prob = 0.1;   // Probability of a shorter random target length.
  std::string data_path;         // Sentence-level indexed dataset prefix (--split_sentences).
  std::string vocab_file;        // WordPiece vocab.txt; empty: the installed bert-base-uncased.
  std::string split = "969,30,1";
  std::string save;              // Checkpoint directory; empty: no checkpoints.
  std::string load;              // Resume from the latest checkpoint here (if any).
  int save_interval = 0;         // Iterations between checkpoints (0: only at the end / SIGTERM).
  int keep_last = 2;
  int threads = 0;               // CPU threads per rank (0: cores / ranks).

  // InvalidArgument naming the flag for inconsistent settings.
  absl::Status Validate(int world_size) const;
  // "key: value" lines of every setting.
  std::string DebugString() const;
};

struct PretrainBertResult {
  double first_lm_loss = 0, last_lm_loss = 0;
  double first_sop_loss = 0, last_sop_loss = 0;
  double valid_lm_loss = 0, valid_sop_loss = 0;
  int64_t iterations = 0;
  bool stopped_by_signal = false;
};

// Collective over `world`. `stop` (may be null) requests a checkpoint and a clean exit (SIGTERM).
absl::StatusOr<PretrainBertResult> RunPretrainBert(const PretrainBertConfig& config,
                                                   comm::Communicator& world,
                                                   const std::atomic<bool>* stop);

}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_PRETRAIN_PRETRAIN_BERT_H_
