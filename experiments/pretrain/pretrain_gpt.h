// The GPT pretraining job as a library function, shared by the pretrain_gpt binary and the
// quickstart: builds the parallel layout, data, model, optimizer and schedule from a typed config,
// resumes from a checkpoint, trains, evaluates, saves, and optionally generates a sample.
#ifndef MT_EXPERIMENTS_PRETRAIN_PRETRAIN_GPT_H_
#define MT_EXPERIMENTS_PRETRAIN_PRETRAIN_GPT_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "comm/communicator.h"
#include "core/dtype.h"
#include "models/config.h"
#include "train/gpt_trainer.h"
#include "train/lr_schedule.h"

namespace mt {
namespace experiments {

struct PretrainGptConfig {
  models::ModelConfig model;
  train::TrainerConfig trainer;
  train::LrScheduleConfig lr;
  double weight_decay = 0.01;
  double clip_grad = 1.0;
  int tensor_model_parallel_size = 1;
  // Mixed precision (f32 master weights and gradients either way): f32, bf16 (--bf16, loss scale 1)
  // or f16 (--fp16, with dynamic loss scaling from 2^32).
  DType compute_dtype = DType::kF32;
  std::string data_path;         // Indexed dataset prefix (.bin/.idx).
  std::string split = "969,30,1";
  std::string save;              // Checkpoint directory; empty: no checkpoints.
  std::string load;              // Resume from the latest checkpoint here (if any).
  int save_interval = 0;         // Iterations between checkpoints (0: only at the end / SIGTERM).
  int keep_last = 2;
  int threads = 0;               // CPU threads per rank (0: cores / local ranks).
  // After training, rank 0 prints `generate_tokens` tokens sampled from this prompt (needs the
  // GPT-2 tokenizer assets); empty: no sample.
  std::string generate_prompt;
  int generate_tokens = 48;

  // InvalidArgument naming the flag for inconsistent settings.
  absl::Status Validate(int world_size) const;
  // "key: value" lines of every setting.
  std::string DebugString() const;
};

struct PretrainResult {
  double first_loss = 0, last_loss = 0;
  double valid_loss = 0, valid_perplexity = 0;
  int64_t iterations = 0;
  bool stopped_by_signal = false;
};

// Collective over `world`. `stop` (may be null) requests a checkpoint and a clean exit (SIGTERM).
absl::StatusOr<PretrainResult> RunPretrainGpt(const PretrainGptConfig& config,
                                              comm::Communicator& world,
                                              const std::atomic<bool>* stop);

}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_PRETRAIN_PRETRAIN_GPT_H_
