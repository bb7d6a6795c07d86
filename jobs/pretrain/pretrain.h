// A pretraining job as a library function, shared by pretrain_gpt, pretrain_bert and the
// quickstart. RunPretraining is four steps (pretrain.cc): set up (device, parallel layout, the
// model from the registry, optimizer, schedule, loss scaler), resume (the latest checkpoint),
// train (train/trainer.h, with periodic evaluation and checkpoints) and finish (the last
// checkpoint and evaluation, then the family's after-training step). What differs between model
// families is only their data (PretrainData: pretrain_gpt.h, pretrain_bert.h); the model itself
// is any registered architecture of the family (models/registry.h), picked by --model.
#ifndef MT_JOBS_PRETRAIN_PRETRAIN_H_
#define MT_JOBS_PRETRAIN_PRETRAIN_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/checkpoint.h"
#include "comm/communicator.h"
#include "comm/parallel_context.h"
#include "comm/world_communicator.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/fields.h"
#include "core/file_system.h"
#include "data/gpt_dataset/gpt_dataset.h"
#include "data/indexed/indexed_dataset.h"
#include "data/loader/blending.h"
#include "data/loader/loader.h"
#include "models/config.h"
#include "models/model.h"
#include "nn/context.h"
#include "nn/transformer.h"
#include "train/lr_schedule.h"
#include "train/trainer.h"

namespace mt {
namespace jobs {

// How the transformer layers keep their activations (Korthikanti et al. 2022), with Megatron-LM's
// flag names: sequence parallelism (TP > 1; the norms, dropouts and residual stream on each TP
// rank's slice of the sequence) and the recomputation granularity (--recompute, the older flag,
// means full).
struct ActivationConfig {
  bool sequence_parallel = false;
  nn::Recompute recompute_granularity = nn::Recompute::kNo;

  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    v("sequence_parallel", &self.sequence_parallel,
      "Run the norms, dropouts and residual adds on each TP rank's slice of the sequence "
      "(all-gather / reduce-scatter instead of all-reduce; needs TP > 1 and a seq_length "
      "divisible by it).");
    v("recompute_granularity", &self.recompute_granularity,
      "none, full (recompute each layer in backward; as --recompute) or selective (only the "
      "attention core).",
      nn::kRecomputeNames);
  }
  // The recomputation the model runs given the older --recompute flag; InvalidArgument when they
  // disagree.
  absl::StatusOr<nn::Recompute> Recompute(bool recompute_flag) const;
  // InvalidArgument naming the flag: sequence parallelism at TP = 1 or with a seq_length that TP
  // does not divide.
  absl::Status Validate(int tensor_parallel, int64_t seq_length) const;
};

// The settings every pretraining job has, with Megatron-LM's flag names (the field table below
// is the drivers' flags: core/config_flags.h).
struct PretrainConfig {
  std::string model_name;  // The registered model the run started from (--model); may be empty.
  models::ModelConfig model;
  train::TrainerConfig trainer;
  train::LrScheduleConfig lr;
  double weight_decay = 0.01;
  double clip_grad = 1.0;
  int tensor_model_parallel_size = 1;
  // Pipeline stages, and the layers of each model chunk of the interleaved schedule (0: 1F1B).
  int pipeline_model_parallel_size = 1;
  int num_layers_per_virtual_pipeline_stage = 0;
  // Context parallelism (models/context_parallel.h): each sequence split into 2 C chunks over C
  // ranks (rank i: chunks i and 2C-1-i), attention as a ring; world = TP x CP x DP x PP.
  int context_parallel_size = 1;
  // Expert parallelism (models with experts): each layer's experts split over this many ranks
  // carved out of the data-parallel ones (consecutive DP ranks form an expert-parallel group);
  // tokens reach their experts by all-to-all. Divides the DP size and num_experts.
  int expert_model_parallel_size = 1;
  // Mixed precision (f32 master weights and gradients either way): f32, bf16 (--bf16, loss scale 1)
  // or f16 (--fp16, with dynamic loss scaling from 2^32).
  DType compute_dtype = DType::kF32;
  // Indexed dataset prefix (.bin/.idx), or Megatron's weighted blend "W1 PREFIX1 W2 PREFIX2 ..."
  // (data/loader/blending.h).
  std::string data_path;
  std::string split = "969,30,1";
  std::string save;  // Checkpoint directory; empty: no checkpoints.
  std::string load;  // Resume from the latest checkpoint here (if any).
  // Megatron's: load the weights only (any TP degree), start at iteration 0 with fresh optimizer,
  // loss-scaler and schedule state (what a converted checkpoint, which has no optimizer state,
  // is always loaded as); or resume but with fresh Adam moments and step (no_load_optim), or
  // recording this run's --seed instead of the checkpoint's (no_load_rng: there is no other RNG
  // state; dropout masks are a function of --seed, the iteration and the sample).
  bool finetune = false;
  bool no_load_optim = false;
  bool no_load_rng = false;
  // The digest each loaded tensor is checked against (checkpoint/checkpoint.h, CheckpointVerify).
  checkpoint::CheckpointVerify checkpoint_verify = checkpoint::CheckpointVerify::kCrc32c;
  int save_interval = 0;  // Iterations between checkpoints (0: only at the end / SIGTERM).
  // Write checkpoints in the background (train/async_save.h): training waits only for the copy of
  // the state to host memory.
  bool async_save = false;
  int keep_last = 2;
  int eval_interval = 0;  // Iterations between evaluations (0: only at the end).
  int threads = 0;        // CPU threads per rank (0: cores / local ranks).
  // kCuda: each rank uses GPU (local rank mod GPUs on its node); model, gradients, optimizer state
  // and activations live there.
  DeviceType device = DeviceType::kCpu;
  // The communicators with --device=cuda: nccl, mpi (CUDA tensors staged through host memory:
  // what works when several ranks share a GPU), or auto (nccl when every local rank has a GPU of
  // its own and the binary has NCCL, else mpi). Always MPI on the CPU.
  comm::CommBackend comm_backend = comm::CommBackend::kAuto;
  // Bucket size of the data-parallel gradient all-reduce, and whether buckets are all-reduced
  // during the backward pass as their gradients become final (overlap) or all after it.
  int64_t dp_bucket_elements = int64_t{1} << 22;
  bool overlap_grad_reduce = true;
  // ZeRO stage 1 (train/distributed_optimizer.h): the Adam moments sharded over the DP ranks,
  // gradients reduce-scattered, masters all-gathered. With one DP rank: the unsharded optimizer.
  bool use_distributed_optimizer = false;
  ActivationConfig activations;

  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    v("model", &self.model_name,
      "A registered model (see //models:describe); the model flags given override its config.");
    models::ModelConfig::Fields(self.model, v);
    train::TrainerConfig::Fields(self.trainer, v);
    train::LrScheduleConfig::Fields(self.lr, v);
    ActivationConfig::Fields(self.activations, v);
    v("weight_decay", &self.weight_decay, "Decoupled weight decay (not on biases or norms).");
    v("clip_grad", &self.clip_grad, "Clip the global gradient L2 norm to this (0: off).");
    v("tensor_model_parallel_size", &self.tensor_model_parallel_size,
      "Tensor-parallel degree (divides the heads).");
    v("pipeline_model_parallel_size", &self.pipeline_model_parallel_size,
      "Pipeline stages (divide the layers; world = TP x CP x DP x PP); the 1F1B schedule.");
    v("num_layers_per_virtual_pipeline_stage", &self.num_layers_per_virtual_pipeline_stage,
      "Layers per model chunk of the interleaved pipeline schedule (0: plain 1F1B).");
    v("context_parallel_size", &self.context_parallel_size,
      "Context-parallel degree C: each sequence split into 2C chunks, rank i of a CP group holding "
      "chunks i and 2C-1-i, attention as a ring (world = TP x CP x DP x PP; CPU; needs "
      "--attention_dropout=0 and a --seq_length divisible by 2C).");
    v("expert_model_parallel_size", &self.expert_model_parallel_size,
      "Ranks each MoE layer's experts split over, out of the data-parallel ranks (divides DP "
      "and num_experts).");
    v("compute_dtype", &self.compute_dtype, "f32, bf16 or f16 (drivers: --fp32/--bf16/--fp16).",
      kFloatDTypeNames);
    v("data_path", &self.data_path,
      "Indexed dataset prefix (PREFIX.bin / PREFIX.idx), or a weighted blend of several: "
      "'0.3 PREFIX_A 0.7 PREFIX_B' (Megatron's --data_path 0.3 A 0.7 B also works).");
    v("split", &self.split, "Train/valid/test document split weights.");
    v("save", &self.save, "Checkpoint directory.");
    v("load", &self.load, "Resume from the latest checkpoint in this directory.");
    v("finetune", &self.finetune,
      "Load only the weights of --load; start at iteration 0 with fresh optimizer state.");
    v("no_load_optim", &self.no_load_optim,
      "Resume from --load but with fresh Adam moments and optimizer step.");
    v("no_load_rng", &self.no_load_rng,
      "Resume from --load but record this run's --seed (dropout always follows --seed).");
    v("checkpoint_verify", &self.checkpoint_verify, checkpoint::kCheckpointVerifyHelp,
      checkpoint::kCheckpointVerifyNames);
    v("save_interval", &self.save_interval,
      "Iterations between checkpoints (0: at the end and on SIGTERM).");
    v("keep_last", &self.keep_last, "Checkpoints to keep.");
    v("async_save", &self.async_save,
      "Write checkpoints in the background: the state is copied to host memory (a CPU store's "
      "by the writer, during the next forward and backward, the update waiting for it; a GPU "
      "store's between iterations), then written; the checkpoint is committed once every rank "
      "has written its shard (the previous one stays the latest until then). A second save "
      "waits for the first. Holds 12 bytes of host memory per parameter of the rank's shard.");
    v("eval_interval", &self.eval_interval,
      "Iterations between validation runs (0: only at the end).");
    v("threads", &self.threads, "CPU threads per rank (0: cores / ranks).");
    v("device", &self.device,
      "cpu, or cuda (each rank on GPU local_rank mod GPUs; bf16 unless --fp16/--fp32).",
      kDeviceTypeNames);
    v("comm_backend", &self.comm_backend,
      "With --device=cuda: nccl, mpi (staged through host memory; ranks may share a GPU) or "
      "auto (nccl when each local rank has its own GPU).",
      comm::kCommBackendNames);
    v("ddp_bucket_size", &self.dp_bucket_elements,
      "Gradient elements per data-parallel all-reduce bucket.");
    v("overlap_grad_reduce", &self.overlap_grad_reduce,
      "All-reduce each data-parallel gradient bucket during backward, as soon as its gradients "
      "are final (false: all buckets after backward).");
    v("use_distributed_optimizer", &self.use_distributed_optimizer,
      "Shard the Adam moments over the data-parallel ranks (ZeRO stage 1): gradient buckets "
      "reduce-scattered, updated weights all-gathered; checkpoints keep the unsharded layout "
      "(any DP size loads them). With one DP rank it is the ordinary optimizer.");
  }

  virtual ~PretrainConfig() = default;
  // InvalidArgument naming the flag for inconsistent settings; NotFound for a missing dataset.
  // Creates --save (with a probe file written and removed: checkpoint::PrepareSaveDirectory), so
  // a place that cannot take checkpoints is refused before training. Family configs extend both
  // (calling these first).
  virtual absl::Status Validate(int world_size) const;
  // "key: value" lines of every setting.
  virtual std::string DebugString() const { return FieldsToText(*this); }
};

// What the family's data streams read on this rank: the indexed datasets of --data_path with
// their normalised weights (one, of weight 1, unless blended), and the loader settings and sample
// counts of the training stream (train_iters global batches, resuming after consumed samples)
// and of one evaluation (the first eval_iters micro-steps of the validation split).
struct DataPlan {
  std::vector<std::shared_ptr<const data::IndexedDataset>> indexed;
  std::vector<double> weights;
  int64_t train_samples = 0, valid_samples = 0;
  data::LoaderConfig train, valid;

  // The sample count and loader settings of the training stream (kTrain) or of one evaluation
  // (any other split).
  int64_t samples(data::Split split) const {
    return split == data::Split::kTrain ? train_samples : valid_samples;
  }
  const data::LoaderConfig& loader(data::Split split) const {
    return split == data::Split::kTrain ? train : valid;
  }
};
// Opens the datasets of config.data_path (NotFound / DataLoss for a missing or corrupt one).
absl::StatusOr<DataPlan> PlanData(const PretrainConfig& config,
                                  const comm::ParallelContext& parallel, int64_t consumed_samples);

// The plan's num_samples samples as one Source (data::TokenSampleSource or BertSampleSource):
// make(indexed, n) builds n samples of one dataset; several datasets are blended by their
// weights (data::BlendingIndex: each gives the samples its weight needs).
template <typename Source, typename Make>
absl::StatusOr<std::shared_ptr<const Source>> PlannedSource(const DataPlan& plan,
                                                            int64_t num_samples, Make make) {
  if (plan.indexed.size() == 1) return make(plan.indexed[0], num_samples);
  auto index = std::make_shared<const data::BlendingIndex>(plan.weights, num_samples);
  std::vector<std::shared_ptr<const Source>> sources;
  for (size_t d = 0; d < plan.indexed.size(); ++d) {
    absl::StatusOr<std::shared_ptr<const Source>> source =
        make(plan.indexed[d], index->samples_needed(static_cast<int>(d)));
    if (!source.ok()) return source.status();
    sources.push_back(*std::move(source));
  }
  return data::BlendSources(std::move(sources), std::move(index));
}

// A family's dataset config (data::GptDatasetConfig, BertDatasetConfig) with the settings they
// share taken from the job: the document split, the sample length, the seed; n samples.
template <typename DatasetConfig>
DatasetConfig SharedDatasetConfig(const PretrainConfig& c, int64_t n) {
  DatasetConfig dc;
  dc.split = c.split;
  dc.seq_len = c.trainer.seq_length;
  dc.num_samples = n;
  dc.seed = c.trainer.seed;
  return dc;
}

// A model family's data (GPT: token samples; BERT: masked sentence pairs), and what the family
// does after training.
class PretrainData {
 public:
  virtual ~PretrainData() = default;
  // This DP rank's micro-batches of `split` (plan.samples(split) samples, loaded as
  // plan.loader(split) says): kTrain, the training stream from plan.train.consumed_samples on;
  // kValid, a fresh stream of validation micro-batches from the first (every evaluation scores
  // the same ones), an error if the split has none (evaluation is then off).
  virtual absl::StatusOr<std::unique_ptr<train::BatchStream>> Batches(const DataPlan& plan,
                                                                      data::Split split) = 0;
  // Runs on every rank after training and the final evaluation, unless stopped by a signal.
  virtual absl::Status AfterTraining(const nn::StepContext& sc, models::Model& model, bool rank0) {
    (void)sc;
    (void)model;
    (void)rank0;
    return absl::OkStatus();
  }
};

// Where this process runs among the job's processes (the MPI runtime says it).
struct LocalRanks {
  int local_rank = 0;  // Among the processes on this host (picks the GPU: local_rank % GPUs).
  int local_size = 1;
};

struct PretrainResult {
  models::Losses first, last;  // Of the first and last iterations run (empty if none ran).
  bool has_valid = false;      // Whether the end-of-training evaluation ran.
  train::EvalResult valid;
  int64_t iterations = 0;
  bool stopped_by_signal = false;
};

// What a test hands a job instead of the real thing (production jobs take the defaults): the file
// system checkpoints are saved and loaded through (core/faulty_file_system.h fails it at a chosen
// byte), and hooks into every training step (train/testing/fault_hooks.h: NaN and inf).
struct JobHooks {
  FileSystem* fs = &DefaultFileSystem();
  train::TrainerHooks* trainer = nullptr;
};

// Collective over `world`. `stop` (may be null) requests a checkpoint and a clean exit (SIGTERM).
absl::StatusOr<PretrainResult> RunPretraining(const PretrainConfig& config, PretrainData& data,
                                              const LocalRanks& local, comm::Communicator& world,
                                              const std::atomic<bool>* stop,
                                              const JobHooks& hooks = {});

}  // namespace jobs
}  // namespace mt

#endif  // MT_JOBS_PRETRAIN_PRETRAIN_H_
