// A pretraining job as a library function, shared by pretrain_gpt, pretrain_bert and the
// quickstart: builds the parallel layout, the model's parameters, optimizer, schedule and loss
// scaler from a typed config, resumes from a checkpoint, trains (train/trainer.h), evaluates
// periodically and at the end, and saves checkpoints. What differs between models (the model, its
// data and losses, what to do after training) is a PretrainModel (pretrain_gpt.h, pretrain_bert.h).
#ifndef MT_EXPERIMENTS_PRETRAIN_PRETRAIN_H_
#define MT_EXPERIMENTS_PRETRAIN_PRETRAIN_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "comm/parallel_context.h"
#include "core/dtype.h"
#include "data/indexed/indexed_dataset.h"
#include "data/loader/loader.h"
#include "models/config.h"
#include "nn/context.h"
#include "nn/parameter.h"
#include "train/lr_schedule.h"
#include "train/trainer.h"

namespace mt {
namespace experiments {

// The settings every pretraining job has (Megatron-LM's flags; pretrain_flags.h fills them).
struct PretrainConfig {
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
  int eval_interval = 0;         // Iterations between evaluations (0: only at the end).
  int threads = 0;               // CPU threads per rank (0: cores / local ranks).
  // "cpu", or "cuda": each rank uses GPU (local rank mod GPUs on its node); model, gradients,
  // optimizer state and activations live there.
  std::string device = "cpu";
  // The communicators with --device=cuda: "nccl", "mpi" (CUDA tensors staged through host
  // memory: what works when several ranks share a GPU), or "auto" (nccl when every local rank has
  // a GPU of its own, else mpi). Always MPI on the CPU.
  std::string comm_backend = "auto";
  // Bucket size of the data-parallel gradient all-reduce, and whether buckets are all-reduced
  // during the backward pass as their gradients become final (overlap) or all after it.
  int64_t dp_bucket_elements = 1 << 22;
  bool overlap_grad_reduce = true;

  virtual ~PretrainConfig() = default;
  // InvalidArgument naming the flag for inconsistent settings; NotFound for a missing dataset.
  // Model-specific configs extend both (calling these first).
  virtual absl::Status Validate(int world_size) const;
  // "key: value" lines of every setting.
  virtual std::string DebugString() const;
};

// What a PretrainModel reads on this rank: the indexed dataset, and the loader settings and sample
// counts of the training stream (train_iters global batches, resuming after consumed samples) and
// of one evaluation (the first eval_iters micro-steps of the validation split).
struct DataPlan {
  std::shared_ptr<const data::IndexedDataset> indexed;
  int64_t train_samples = 0, valid_samples = 0;
  data::LoaderConfig train, valid;
};
// Opens config.data_path (NotFound / DataLoss for a missing or corrupt dataset).
absl::StatusOr<DataPlan> PlanData(const PretrainConfig& config,
                                  const comm::ParallelContext& parallel, int64_t consumed_samples);

struct PretrainResult {
  train::Losses first, last;  // Of the first and last iterations run (empty if none ran).
  bool has_valid = false;     // Whether the end-of-training evaluation ran.
  train::EvalResult valid;
  int64_t iterations = 0;
  bool stopped_by_signal = false;
};

// The model-specific steps of a job.
class PretrainModel {
 public:
  virtual ~PretrainModel() = default;
  // Declares the model's parameters in `store` (not yet allocated).
  virtual absl::Status CreateModel(nn::ParameterStore* store) = 0;
  // The task running the model on this rank's data: training micro-batches from
  // `consumed_samples` on, and validation micro-batches (eval_iters micro-steps) if the split has
  // any (the task's StartValidation fails otherwise).
  virtual absl::StatusOr<std::unique_ptr<train::TrainingTask>> CreateTask(
      const comm::ParallelContext& parallel, int64_t consumed_samples) = 0;
  // Runs on every rank after training and the final evaluation, unless stopped by a signal.
  virtual absl::Status AfterTraining(const nn::StepContext& sc, bool rank0) {
    (void)sc;
    (void)rank0;
    return absl::OkStatus();
  }
};

// Collective over `world`. `stop` (may be null) requests a checkpoint and a clean exit (SIGTERM).
// `make_model` is called once, after the device and the parameter store are set up; the job it
// returns is destroyed before them (its tensors come from the device's allocator).
absl::StatusOr<PretrainResult> RunPretraining(
    const PretrainConfig& config,
    const std::function<std::unique_ptr<PretrainModel>()>& make_model,
    comm::Communicator& world, const std::atomic<bool>* stop);

}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_PRETRAIN_PRETRAIN_H_
