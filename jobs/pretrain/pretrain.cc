#include "jobs/pretrain/pretrain.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/hf_checkpoint.h"
#include "checkpoint/model_loading.h"
#include "comm/world_communicator.h"
#include "core/cuda_device.h"
#include "core/openblas.h"
#include "core/ops/elementwise.h"
#include "core/ops/gemm.h"
#include "core/rank_execution.h"
#include "core/status.h"
#include "jobs/pretrain/context_parallel_flags.h"
#include "jobs/pretrain/expert_parallel.h"
#include "models/registry.h"
#include "models/stages.h"
#include "nn/parameter.h"
#include "train/async_save.h"
#include "train/loss_scaler.h"
#include "train/optimizer.h"
#include "train/pipeline_schedule.h"
#include "train/training_state.h"

namespace mt {
namespace jobs {

namespace {

// The checks on the trainer's own settings that others (the schedule's sample counts, the
// model's positions) derive from, so that the message names the flag given.
absl::Status ValidateTrainerFlags(const train::TrainerConfig& t) {
  for (auto [name, v] : {std::pair<const char*, int64_t>{"train_iters", t.train_iters},
                         {"micro_batch_size", t.micro_batch_size},
                         {"global_batch_size", t.global_batch_size},
                         {"seq_length", t.seq_length}}) {
    if (v < 1) return absl::InvalidArgumentError(absl::StrCat(name, " must be >= 1, got ", v));
  }
  if (t.eval_iters < 0) return absl::InvalidArgumentError("eval_iters must be >= 0 (0: none)");
  return absl::OkStatus();
}

// A path given for a directory that exists as something else.
absl::Status CheckDirectoryFlag(const char* flag, const std::string& path) {
  std::error_code ec;
  if (path.empty() || !std::filesystem::exists(path, ec) ||
      std::filesystem::is_directory(path, ec)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, "=", path, " is not a directory (a checkpoint directory)"));
}

}  // namespace

absl::StatusOr<nn::Recompute> ActivationConfig::Recompute(bool recompute_flag) const {
  if (!recompute_flag) return recompute_granularity;
  if (recompute_granularity == nn::Recompute::kSelective) {
    return absl::InvalidArgumentError(
        "--recompute (full recomputation) contradicts --recompute_granularity=selective");
  }
  return nn::Recompute::kYes;
}

absl::Status ActivationConfig::Validate(int tensor_parallel, int64_t seq_length) const {
  if (!sequence_parallel) return absl::OkStatus();
  if (tensor_parallel < 2) {
    return absl::InvalidArgumentError(
        "--sequence_parallel needs tensor parallelism (--tensor_model_parallel_size > 1)");
  }
  if (seq_length % tensor_parallel != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--sequence_parallel: --seq_length ", seq_length,
                     " is not divisible by --tensor_model_parallel_size ", tensor_parallel));
  }
  return absl::OkStatus();
}

// The pipeline flags that do not fit the batch, refused before anything runs; `micro_batches`: per
// iteration and DP rank.
absl::Status ValidatePipelineFlags(const PretrainConfig& c, int64_t micro_batches) {
  const int pp = c.pipeline_model_parallel_size;
  if (c.num_layers_per_virtual_pipeline_stage > 0 && micro_batches % pp != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the interleaved pipeline schedule (--num_layers_per_virtual_pipeline_stage) needs the ",
        micro_batches, " micro-batches per iteration (global_batch_size / (micro_batch_size x ",
        "data-parallel size)) to be a multiple of --pipeline_model_parallel_size=", pp));
  }
  return absl::OkStatus();
}

absl::Status PretrainConfig::Validate(int world_size) const {
  RETURN_IF_ERROR(ValidateTrainerFlags(trainer));
  RETURN_IF_ERROR(activations.Validate(tensor_model_parallel_size, trainer.seq_length));
  RETURN_IF_ERROR(activations.Recompute(trainer.recompute).status());
  RETURN_IF_ERROR(model.ValidateParallel(tensor_model_parallel_size));
  RETURN_IF_ERROR(lr.Validate());
  const train::TrainerConfig& t = trainer;
  RETURN_IF_ERROR(ValidateContextParallel(*this));
  const int cp = context_parallel_size;
  const int model_parallel = tensor_model_parallel_size * cp * pipeline_model_parallel_size;
  if (pipeline_model_parallel_size < 1 || world_size % model_parallel != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("world size ", world_size, " is not divisible by tensor_model_parallel_size ",
                     tensor_model_parallel_size,
                     cp > 1 ? absl::StrCat(" x context_parallel_size ", cp) : std::string(),
                     " x pipeline_model_parallel_size ", pipeline_model_parallel_size));
  }
  RETURN_IF_ERROR(comm::MakePipelineSplit(model.num_layers, pipeline_model_parallel_size,
                                          num_layers_per_virtual_pipeline_stage)
                      .status());
  const int dp = world_size / model_parallel;
  if (t.micro_batch_size < 1 || t.global_batch_size % (t.micro_batch_size * dp) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "global_batch_size ", t.global_batch_size, " must be a multiple of micro_batch_size ",
        t.micro_batch_size, " x data-parallel size ", dp));
  }
  RETURN_IF_ERROR(ValidatePipelineFlags(*this, t.global_batch_size / (t.micro_batch_size * dp)));
  RETURN_IF_ERROR(ValidateExpertParallel(*this, dp));
  if (t.seq_length < 1 || t.seq_length > model.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat(
        "seq_length ", t.seq_length,
        " must be in [1, max_position_embeddings = ", model.max_position_embeddings, "]"));
  }
  if (t.log_interval < 1) return absl::InvalidArgumentError("log_interval must be >= 1");
  RETURN_IF_ERROR(t.logging.Validate());
  if (t.max_nan_skips < 0) return absl::InvalidArgumentError("max_nan_skips must be >= 0");
  if (eval_interval < 0) return absl::InvalidArgumentError("eval_interval must be >= 0");
  if (dp_bucket_elements < 1) return absl::InvalidArgumentError("ddp_bucket_size must be >= 1");
  if (data_path.empty()) return absl::InvalidArgumentError("--data_path is required");
  ASSIGN_OR_RETURN(const std::vector<data::DataPathEntry> datasets, data::ParseDataPath(data_path));
  for (const data::DataPathEntry& d : datasets) {
    if (std::error_code ec; !std::filesystem::exists(d.prefix + ".idx", ec)) {
      return absl::NotFoundError(
          absl::StrCat("--data_path ", data_path, ": ", d.prefix,
                       ".idx does not exist (make one with //data:preprocess)"));
    }
  }
  if (save_interval < 0) return absl::InvalidArgumentError("save_interval must be >= 0");
  if (!(clip_grad >= 0)) return absl::InvalidArgumentError("clip_grad must be >= 0 (0: off)");
  if (threads < 0) return absl::InvalidArgumentError("threads must be >= 0 (0: cores / ranks)");
  RETURN_IF_ERROR(CheckDirectoryFlag("load", load));
  if (!save.empty()) {
    // Refused now, not at the first save after the training it was meant to keep.
    if (absl::Status writable = checkpoint::PrepareSaveDirectory(save); !writable.ok()) {
      return absl::Status(writable.code(), absl::StrCat("--save=", save, ": ", writable.message()));
    }
  }
  RETURN_IF_ERROR(comm::ValidateCommBackend(comm_backend, device));
  if (!IsFloating(compute_dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("compute dtype ", DTypeName(compute_dtype),
                                                   " must be f32, bf16 (--bf16) or f16 (--fp16)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<DataPlan> PlanData(const PretrainConfig& c, const comm::ParallelContext& parallel,
                                  int64_t consumed_samples) {
  DataPlan plan;
  ASSIGN_OR_RETURN(const std::vector<data::DataPathEntry> datasets,
                   data::ParseDataPath(c.data_path));
  for (const data::DataPathEntry& d : datasets) {
    ASSIGN_OR_RETURN(auto indexed, data::IndexedDataset::Open(d.prefix));
    plan.indexed.push_back(std::move(indexed));
    plan.weights.push_back(d.weight);
  }
  const int64_t global = c.trainer.global_batch_size;
  const int64_t step = c.trainer.micro_batch_size * parallel.dp_size();
  plan.train_samples = c.trainer.train_iters * global;
  plan.valid_samples = std::max(1, c.trainer.eval_iters) * step;
  data::LoaderConfig lc;
  lc.micro_batch_size = c.trainer.micro_batch_size;
  lc.data_parallel_size = parallel.dp_size();
  lc.data_parallel_rank = parallel.dp_rank();
  plan.train = plan.valid = lc;
  plan.train.global_batch_size = global;
  plan.train.consumed_samples = consumed_samples;
  plan.valid.global_batch_size = step;  // One micro-step per "batch": no accumulation.
  return plan;
}

namespace {

// Everything a running job holds, built by SetUp. Members are destroyed in reverse order, so the
// model's tensors go before the device's allocator and context.
struct Job {
  ~Job() {
    // The world communicator may outlive the job (MpiMain's): it must not keep our monitor.
    if (world.comm != nullptr && world.comm->call_monitor() == &monitor) {
      world.comm->set_call_monitor(nullptr);
    }
  }
  JobHooks hooks;
  // Where the communicators record their calls when no watchdog does (--distributed_timeout=0):
  // the straggler report's time in communication.
  comm::CallMonitor monitor;
  // The threads and the GPU (every GPU tensor's memory from its caching allocator: all kernels
  // run on the default stream, so blocks are reused safely).
  RankExecution rank;
  comm::WorldCommunicator world;  // NCCL, or the MPI world itself (--comm_backend).
  std::unique_ptr<comm::ParallelContext> parallel;
  // The expert-parallel group (--expert_model_parallel_size > 1); the models hold it.
  std::unique_ptr<comm::Communicator> ep;
  std::unique_ptr<comm::Communicator> edp;  // The expert-data-parallel group, with `ep`.
  std::unique_ptr<nn::ParameterStore> store;
  // This rank's model chunks (one unless the interleaved pipeline schedule); `model` is the first.
  std::vector<std::unique_ptr<models::Model>> chunks;
  models::Model* model = nullptr;
  train::ChunkFactory more_chunks;  // Further instances of the chunks (PP > 1).
  std::unique_ptr<train::Optimizer> optimizer;
  std::unique_ptr<train::LrSchedule> schedule;
  std::unique_ptr<train::LossScaler> scaler;
  std::unique_ptr<train::AsyncSaver> saver;  // With --async_save.
  train::TrainingCounters counters;          // Where training starts (after Resume).
  bool rank0 = false;
  bool verbose = false;  // Rank 0 prints progress.
};

// Sets up this rank's threads and GPU, and what it needs there. Collective over `world` when it
// creates NCCL communicators.
absl::Status SetUpDevice(const PretrainConfig& c, const LocalRanks& local,
                         comm::Communicator& world, Job* job) {
  RankExecutionOptions ro;
  ro.cuda = c.device == DeviceType::kCuda;
  ro.threads = c.threads;  // Shares the cores among the ranks of this machine.
  ro.local_rank = local.local_rank;
  ro.local_size = local.local_size;
  ASSIGN_OR_RETURN(job->rank, CreateRankExecution(ro));
  ASSIGN_OR_RETURN(job->world, comm::CreateWorldCommunicator(world, job->rank.exec.device,
                                                             c.comm_backend, local.local_size));
  return absl::OkStatus();
}

void PrintArguments(const PretrainConfig& c, const Job& job) {
  std::printf(
      "------------------------ arguments ------------------------\n%s"
      "loss_scale: %s\nworld_size: %d (data-parallel size %d)\n"
      "-------------------- end of arguments ---------------------\n",
      c.DebugString().c_str(), c.compute_dtype == DType::kF16 ? "dynamic" : "1",
      job.parallel->world_size(), job.parallel->dp_size());
  std::printf("blas: %s\n", DescribeBlas().c_str());
  if (job.rank.exec.device.is_cpu()) {
    std::printf("gemm: %s\n", ops::DescribeCpuGemm().c_str());
  } else {
    std::printf("device: %s (of %d on this node), communicators: %s\n",
                job.rank.exec.device.ToString().c_str(), cuda::DeviceCount(),
                job.world.nccl() ? "nccl" : "mpi (CUDA tensors staged through host memory)");
  }
}

// Step 1: the device, the parallel layout, and the model with its optimizer state.
absl::StatusOr<std::unique_ptr<Job>> SetUp(const PretrainConfig& c, const LocalRanks& local,
                                           comm::Communicator& world, const JobHooks& hooks) {
  auto job = std::make_unique<Job>();
  job->hooks = hooks;
  RETURN_IF_ERROR(SetUpDevice(c, local, world, job.get()));
  if (job->world.comm->call_monitor() == nullptr) job->world.comm->set_call_monitor(&job->monitor);
  comm::ParallelConfig pc;
  pc.tensor_parallel = c.tensor_model_parallel_size;
  pc.pipeline_parallel = c.pipeline_model_parallel_size;
  pc.context_parallel = c.context_parallel_size;
  ASSIGN_OR_RETURN(job->parallel, comm::ParallelContext::Create(*job->world.comm, pc,
                                                                c.model.num_attention_heads));
  job->rank0 = job->parallel->rank() == 0;
  job->verbose = job->rank0 && !c.trainer.quiet;
  if (job->verbose) PrintArguments(c, *job);

  job->store = std::make_unique<nn::ParameterStore>(
      job->parallel->tp_rank(), job->parallel->tp_size(), c.compute_dtype, job->rank.exec.device);
  models::ModelOptions options;
  ASSIGN_OR_RETURN(options.recompute, c.activations.Recompute(c.trainer.recompute));
  options.sequence_parallel = c.activations.sequence_parallel;
  options.context_parallel = c.context_parallel_size;
  RETURN_IF_ERROR(CreateExpertGroups(c.expert_model_parallel_size, *job->parallel, *job->world.comm,
                                     &job->ep, &job->edp));
  options.expert_parallel = job->ep.get();
  ASSIGN_OR_RETURN(const comm::PipelineSplit split,
                   comm::MakePipelineSplit(c.model.num_layers, c.pipeline_model_parallel_size,
                                           c.num_layers_per_virtual_pipeline_stage));
  ASSIGN_OR_RETURN(job->chunks, models::CreateStageModels(c.model, job->store.get(), options, split,
                                                          job->parallel->pp_rank()));
  job->model = job->chunks.front().get();
  RETURN_IF_ERROR(job->store->Allocate(c.trainer.seed));
  if (split.stages > 1) {
    ASSIGN_OR_RETURN(job->more_chunks, train::StageChunkFactory(c.model, job->store.get(), options,
                                                                split, job->parallel->pp_rank()));
  }
  train::OptimizerConfig oc;
  oc.weight_decay = static_cast<float>(c.weight_decay);
  oc.clip_grad = c.clip_grad;
  oc.dp_bucket_elements = c.dp_bucket_elements;
  oc.overlap_grad_reduce = c.overlap_grad_reduce;
  oc.use_distributed_optimizer = c.use_distributed_optimizer;
  oc.log_num_zeros_in_grad = c.trainer.logging.log_num_zeros_in_grad;
  oc.log_params_norm = c.trainer.logging.log_params_norm;
  ASSIGN_OR_RETURN(train::Optimizer optimizer,
                   train::Optimizer::Create(job->store.get(), oc, &job->parallel->dp_cp(),
                                            {job->ep.get(), job->edp.get()}));
  job->optimizer = std::make_unique<train::Optimizer>(std::move(optimizer));
  if (job->verbose) {
    // With expert parallelism every rank of an EP group holds as many (its own experts).
    std::printf("parameter elements on rank 0: %lld; adam moments: 2 x %lld elements\n",
                static_cast<long long>(job->store->NumLocalElements()),
                static_cast<long long>(job->optimizer->exp_avg().numel()));
  }
  job->schedule = std::make_unique<train::LrSchedule>(c.lr);
  train::LossScalerConfig scaler_config;
  scaler_config.dynamic = c.compute_dtype == DType::kF16;  // bf16 and f32 need no loss scaling.
  job->scaler = std::make_unique<train::LossScaler>(scaler_config);
  job->counters.seed = c.trainer.seed;
  if (c.async_save && !c.save.empty()) {
    job->saver = std::make_unique<train::AsyncSaver>(c.save, c.keep_last, job->parallel.get(),
                                                     job->hooks.fs);
    job->optimizer->set_before_update([s = job->saver.get()] { s->WaitForCopy(); });
    // The snapshot's memory now, not at the first save (12 bytes per parameter, touched).
    ASSIGN_OR_RETURN(std::unique_ptr<train::TrainingSnapshot> spare,
                     train::ReserveTrainingSnapshot(*job->parallel, *job->store, *job->optimizer,
                                                    job->rank.exec.pool));
    job->saver->set_spare(std::move(spare));
  }
  return job;
}

// --finetune, or a checkpoint convert_checkpoint wrote (no optimizer state): the weights only,
// at any TP degree; training starts at iteration 0.
absl::Status LoadWeightsOnly(const PretrainConfig& c, const std::string& why, Job* job) {
  ASSIGN_OR_RETURN(const checkpoint::CheckpointModel ckpt,
                   checkpoint::ReadCheckpointModel(c.load, /*iteration=*/-1, *job->hooks.fs));
  checkpoint::ParameterLoadOptions options;
  options.verify = c.checkpoint_verify;
  // A pipeline stage holds its own parameters only, an expert-parallel rank its own experts: the
  // others' are not its to load.
  options.allow_unexpected = job->parallel->pp_size() > 1 || job->ep != nullptr;
  RETURN_IF_ERROR(
      train::LoadWeights(ckpt, job->rank.exec, job->store.get(), job->optimizer.get(), options)
          .status());
  if (job->verbose) {
    std::printf(
        "loaded the weights of %s iteration %lld only (%s): starting at iteration 0 "
        "with fresh optimizer state\n",
        c.load.c_str(), static_cast<long long>(ckpt.iteration), why.c_str());
  }
  return absl::OkStatus();
}

// Step 2: the latest checkpoint under --load, if there is one.
absl::Status Resume(const PretrainConfig& c, Job* job) {
  if (c.load.empty()) return absl::OkStatus();
  FileSystem& fs = *job->hooks.fs;
  absl::StatusOr<int64_t> latest = checkpoint::LatestIteration(c.load, fs);
  if (absl::IsNotFound(latest.status())) {
    if (job->verbose) std::printf("no checkpoint in %s: starting from scratch\n", c.load.c_str());
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(latest.status());
  ASSIGN_OR_RETURN(
      const checkpoint::CheckpointMetadata meta,
      checkpoint::ReadShardMetadata(c.load, *latest, /*tp_rank=*/0, /*pp_rank=*/0, fs));
  if (c.finetune) return LoadWeightsOnly(c, "--finetune", job);
  if (checkpoint::ParseHfConversionState(meta.trainer_state_json).has_value()) {
    return LoadWeightsOnly(c, "a converted checkpoint without optimizer state, as --finetune", job);
  }
  RETURN_IF_ERROR(train::LoadTrainingState(
      c.load, *job->parallel, c.model, job->store.get(), job->optimizer.get(), job->scaler.get(),
      job->schedule.get(), &job->counters, fs, c.checkpoint_verify));
  if (c.no_load_optim) {
    RETURN_IF_ERROR(ops::Fill(job->rank.exec, job->optimizer->exp_avg(), 0.0));
    RETURN_IF_ERROR(ops::Fill(job->rank.exec, job->optimizer->exp_avg_sq(), 0.0));
    job->optimizer->set_step(0);
  }
  if (c.no_load_rng) job->counters.seed = c.trainer.seed;
  if (job->verbose) {
    std::printf("loaded checkpoint from %s at iteration %lld (consumed samples %lld)%s%s\n",
                c.load.c_str(), static_cast<long long>(job->counters.iteration),
                static_cast<long long>(job->counters.consumed_samples),
                c.no_load_optim ? ", fresh optimizer state (--no_load_optim)" : "",
                c.no_load_rng ? ", this run's --seed (--no_load_rng)" : "");
  }
  return absl::OkStatus();
}

// With --async_save: commits the save in flight once every rank has written it (collective;
// `wait`: waits for it), and says so.
absl::Status SettleAsyncSave(const PretrainConfig& c, const Job& job, bool wait) {
  if (job.saver == nullptr || !job.saver->in_flight()) return absl::OkStatus();
  const int64_t before = job.saver->committed_iteration();
  RETURN_IF_ERROR(wait ? job.saver->Finish() : job.saver->Poll());
  if (job.verbose && job.saver->committed_iteration() != before) {
    std::printf(
        "saved checkpoint at iteration %lld to %s (written in the background in %.2f s; the "
        "updates have waited %.3f s for copies)\n",
        static_cast<long long>(job.saver->committed_iteration()), c.save.c_str(),
        job.saver->last_write_seconds(), job.saver->copy_wait_seconds());
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

// Saves the state after `iteration` under --save: at once, or with --async_save a copy in host
// memory that a background thread writes (committed by a later SettleAsyncSave).
absl::Status Save(const PretrainConfig& c, const Job& job, const train::Trainer& trainer,
                  int64_t iteration) {
  train::TrainingCounters now = job.counters;
  now.iteration = iteration;
  now.consumed_samples = trainer.consumed_samples();
  now.skipped_iterations = trainer.skipped_iterations();
  auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  const auto start = std::chrono::steady_clock::now();
  if (job.saver != nullptr) {
    RETURN_IF_ERROR(SettleAsyncSave(c, job, /*wait=*/true));  // One save at a time.
    const double waited = since(start);
    const auto copy_start = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(
        std::unique_ptr<train::TrainingSnapshot> snapshot,
        train::SnapshotTrainingState(*job.parallel, c.model, *job.store, *job.optimizer,
                                     *job.scaler, *job.schedule, now, c.model_name,
                                     job.rank.exec.pool, job.saver->TakeSpare(),
                                     /*defer_copy=*/true));
    const double copy_bytes = static_cast<double>(snapshot->bytes());
    const char* how = snapshot->copy_deferred() ? "handed to the writer to copy to" : "copied to";
    RETURN_IF_ERROR(job.saver->Start(std::move(snapshot)));
    if (job.verbose) {
      const std::string wait =
          waited > 1e-3 ? absl::StrFormat(" after waiting %.3f s for the previous save", waited)
                        : "";
      std::printf(
          "checkpoint at iteration %lld: state %s host memory (%.0f MB) in %.3f s%s, writing in "
          "the background\n",
          static_cast<long long>(iteration), how, copy_bytes / 1e6, since(copy_start),
          wait.c_str());
      std::fflush(stdout);
    }
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(train::SaveTrainingState(c.save, c.keep_last, *job.parallel, c.model, *job.store,
                                           *job.optimizer, *job.scaler, *job.schedule, now,
                                           c.model_name, *job.hooks.fs));
  if (job.verbose) {
    std::printf("saved checkpoint at iteration %lld to %s in %.2f s\n",
                static_cast<long long>(iteration), c.save.c_str(), since(start));
  }
  return absl::OkStatus();
}

// One evaluation over a fresh validation stream, printed as " validation <when> | lm loss ...".
absl::StatusOr<train::EvalResult> Evaluate(PretrainData& data, const DataPlan& plan, const Job& job,
                                           train::Trainer& trainer, const std::string& when) {
  ASSIGN_OR_RETURN(std::unique_ptr<train::BatchStream> valid,
                   data.Batches(plan, data::Split::kValid));
  ASSIGN_OR_RETURN(train::EvalResult e, trainer.Evaluate(*valid));
  RETURN_IF_ERROR(trainer.LogValidation(e));
  if (job.verbose) {
    std::printf(" validation %s%s | lm loss PPL: %.6E\n", when.c_str(),
                trainer.FormatLosses(e.loss).c_str(), e.perplexity);
  }
  return e;
}

std::vector<models::Model*> ChunkPointers(const Job& job) {
  std::vector<models::Model*> out;
  for (const auto& m : job.chunks) out.push_back(m.get());
  return out;
}

// With pipeline stages, the measured bubble of every stage: 1 - (its time computing) / (the
// longest stage's time in the schedule), per iteration on average; the stages enter the schedule
// together (the previous step's reductions synchronise them). Gathered over rank 0's pipeline
// group (collective over it).
absl::Status PrintPipelineBubble(const Job& job, const train::Trainer& trainer) {
  const train::PipelineTotals& p = trainer.pipeline_totals();
  if (job.parallel->pp_size() == 1 || p.iterations == 0) return absl::OkStatus();
  comm::Communicator& pp = job.parallel->pp();
  Tensor mine = Tensor::Host({2}, DType::kF32);
  mine.data_as<float>()[0] = static_cast<float>(p.seconds / p.iterations);
  mine.data_as<float>()[1] = static_cast<float>((p.seconds - p.wait_seconds) / p.iterations);
  Tensor all = Tensor::Host({2 * pp.size()}, DType::kF32);
  RETURN_IF_ERROR(pp.AllGather(mine.view(), all.view()));
  if (!job.verbose) return absl::OkStatus();
  const float* v = all.data_as<float>();
  double makespan = 0;
  for (int s = 0; s < pp.size(); ++s) makespan = std::max(makespan, double{v[2 * s]});
  std::string shares;
  for (int s = 0; s < pp.size(); ++s) {
    absl::StrAppendFormat(&shares, "%s%.1f%%", s == 0 ? "" : " / ",
                          100.0 * (1.0 - v[2 * s + 1] / makespan));
  }
  std::printf(
      "pipeline: %d stages, %lld iterations, %.1f ms per iteration in the schedule; bubble (idle "
      "share) per stage: %s; stage 0: activation sets %lld, forwards recomputed %lld\n",
      pp.size(), static_cast<long long>(p.iterations), 1e3 * makespan, shares.c_str(),
      static_cast<long long>(p.instances), static_cast<long long>(p.recomputed));
  return absl::OkStatus();
}

// Step 3: the training loop over `train_data`, evaluating and saving every eval_interval /
// save_interval iterations. `has_valid`: whether the family has validation data.
absl::StatusOr<std::unique_ptr<train::Trainer>> Train(const PretrainConfig& c, PretrainData& data,
                                                      const DataPlan& plan,
                                                      train::BatchStream& train_data,
                                                      bool has_valid, Job& job,
                                                      const std::atomic<bool>* stop) {
  ASSIGN_OR_RETURN(std::unique_ptr<train::Trainer> trainer,
                   train::Trainer::Create(
                       c.trainer, {job.parallel.get(), &job.rank.exec, job.model, job.store.get(),
                                   job.optimizer.get(), job.schedule.get(), job.scaler.get(),
                                   ChunkPointers(job), job.more_chunks, job.hooks.trainer}));
  trainer->set_consumed_samples(job.counters.consumed_samples);
  trainer->set_skipped_iterations(job.counters.skipped_iterations);
  auto on_iteration = [&](int64_t iteration) -> absl::Status {
    RETURN_IF_ERROR(SettleAsyncSave(c, job, /*wait=*/false));
    if (has_valid && c.eval_interval > 0 && iteration % c.eval_interval == 0) {
      RETURN_IF_ERROR(
          Evaluate(data, plan, job, *trainer, absl::StrCat("at iteration ", iteration)).status());
    }
    if (!c.save.empty() && c.save_interval > 0 && iteration % c.save_interval == 0 &&
        iteration < c.trainer.train_iters) {
      return Save(c, job, *trainer, iteration);
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(trainer->Train(train_data, job.counters.iteration, stop, on_iteration));
  RETURN_IF_ERROR(PrintPipelineBubble(job, *trainer));
  return trainer;
}

// Step 4: the last checkpoint and evaluation, and the family's after-training step (skipped when
// stopped by a signal, after the checkpoint).
absl::StatusOr<PretrainResult> Finish(const PretrainConfig& c, PretrainData& data,
                                      const DataPlan& plan, bool has_valid, Job& job,
                                      train::Trainer& trainer) {
  PretrainResult result;
  result.iterations = trainer.iteration();
  result.stopped_by_signal = trainer.stopped_early();
  if (!trainer.history().empty()) {
    result.first = trainer.history().front().loss;
    result.last = trainer.history().back().loss;
  }
  if (!c.save.empty() &&
      (result.stopped_by_signal || trainer.iteration() > job.counters.iteration)) {
    RETURN_IF_ERROR(Save(c, job, trainer, trainer.iteration()));
  }
  RETURN_IF_ERROR(SettleAsyncSave(c, job, /*wait=*/true));  // The job ends with it committed.
  if (result.stopped_by_signal) return result;
  if (has_valid) {
    ASSIGN_OR_RETURN(result.valid, Evaluate(data, plan, job, trainer, "at the end"));
    result.has_valid = true;
  }
  if (job.parallel->pp_size() > 1 || job.parallel->cp_size() > 1) {
    if (job.verbose) {
      std::printf("%s: no after-training step (generation)\n",
                  job.parallel->pp_size() > 1 ? "pipeline stages" : "context parallelism");
    }
    return result;
  }
  const nn::StepContext sc = nn::StepContext::Eval(&job.rank.exec, job.parallel->tp_or_null());
  RETURN_IF_ERROR(data.AfterTraining(sc, *job.model, job.rank0));
  return result;
}

// Whether the family has validation data (evaluation is off otherwise, with a note).
bool HasValidation(const PretrainConfig& c, PretrainData& data, const DataPlan& plan,
                   const Job& job) {
  if (c.trainer.eval_iters <= 0) return false;
  const absl::Status v = data.Batches(plan, data::Split::kValid).status();
  if (!v.ok() && job.verbose) {
    std::printf("no validation data (%s): evaluation disabled\n", std::string(v.message()).c_str());
  }
  return v.ok();
}

}  // namespace

absl::StatusOr<PretrainResult> RunPretraining(const PretrainConfig& c, PretrainData& data,
                                              const LocalRanks& local, comm::Communicator& world,
                                              const std::atomic<bool>* stop,
                                              const JobHooks& hooks) {
  RETURN_IF_ERROR(c.Validate(world.size()));
  ASSIGN_OR_RETURN(std::unique_ptr<Job> job, SetUp(c, local, world, hooks));
  RETURN_IF_ERROR(Resume(c, job.get()));
  ASSIGN_OR_RETURN(const DataPlan plan,
                   PlanData(c, *job->parallel, job->counters.consumed_samples));
  ASSIGN_OR_RETURN(std::unique_ptr<train::BatchStream> train_data,
                   data.Batches(plan, data::Split::kTrain));
  const bool has_valid = HasValidation(c, data, plan, *job);
  ASSIGN_OR_RETURN(std::unique_ptr<train::Trainer> trainer,
                   Train(c, data, plan, *train_data, has_valid, *job, stop));
  return Finish(c, data, plan, has_valid, *job, *trainer);
}

}  // namespace jobs
}  // namespace mt
