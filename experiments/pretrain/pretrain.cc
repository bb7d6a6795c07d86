#include "experiments/pretrain/pretrain.h"

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "comm/nccl_communicator.h"
#include "core/cuda/caching_allocator.h"
#include "core/cuda/device_context.h"
#include "core/cuda_device.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "train/loss_scaler.h"
#include "train/optimizer.h"
#include "train/training_state.h"

namespace mt {
namespace experiments {

absl::Status PretrainConfig::Validate(int world_size) const {
  RETURN_IF_ERROR(model.ValidateParallel(tensor_model_parallel_size));
  RETURN_IF_ERROR(lr.Validate());
  const train::TrainerConfig& t = trainer;
  if (world_size % tensor_model_parallel_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("world size ", world_size, " is not divisible by tensor_model_parallel_size ",
                     tensor_model_parallel_size));
  }
  const int dp = world_size / tensor_model_parallel_size;
  if (t.micro_batch_size < 1 || t.global_batch_size % (t.micro_batch_size * dp) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "global_batch_size ", t.global_batch_size, " must be a multiple of micro_batch_size ",
        t.micro_batch_size, " x data-parallel size ", dp));
  }
  if (t.seq_length < 1 || t.seq_length > model.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat("seq_length ", t.seq_length,
                                                   " must be in [1, max_position_embeddings = ",
                                                   model.max_position_embeddings, "]"));
  }
  if (t.train_iters < 1) return absl::InvalidArgumentError("train_iters must be >= 1");
  if (t.log_interval < 1) return absl::InvalidArgumentError("log_interval must be >= 1");
  if (eval_interval < 0) return absl::InvalidArgumentError("eval_interval must be >= 0");
  if (dp_bucket_elements < 1) return absl::InvalidArgumentError("ddp_bucket_size must be >= 1");
  if (data_path.empty()) return absl::InvalidArgumentError("--data_path is required");
  if (std::error_code ec; !std::filesystem::exists(data_path + ".idx", ec)) {
    return absl::NotFoundError(absl::StrCat("--data_path ", data_path, ": ", data_path,
                                            ".idx does not exist (make one with //data:preprocess)"));
  }
  if (save_interval < 0) return absl::InvalidArgumentError("save_interval must be >= 0");
  if (device != "cpu" && device != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--device=", device, ": must be cpu or cuda"));
  }
  if (comm_backend != "auto" && comm_backend != "mpi" && comm_backend != "nccl") {
    return absl::InvalidArgumentError(
        absl::StrCat("--comm_backend=", comm_backend, ": must be auto, mpi or nccl"));
  }
  if (device == "cpu" && comm_backend == "nccl") {
    return absl::InvalidArgumentError("--comm_backend=nccl needs --device=cuda");
  }
  if (!IsFloating(compute_dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("compute dtype ", DTypeName(compute_dtype),
                                                   " must be f32, bf16 (--bf16) or f16 (--fp16)"));
  }
  return absl::OkStatus();
}

std::string PretrainConfig::DebugString() const {
  const train::TrainerConfig& t = trainer;
  return absl::StrCat(
      model.DebugString(),
      absl::StrFormat(
          "tensor_model_parallel_size: %d\nseq_length: %d\nmicro_batch_size: %d\n"
          "global_batch_size: %d\ntrain_iters: %d\nlr: %g\nmin_lr: %g\nlr_warmup_samples: %d\n"
          "lr_decay_samples: %d\nlr_decay_style: %s\nweight_decay: %g\nclip_grad: %g\n"
          "recompute: %s\nseed: %d\ndata_path: %s\nsplit: %s\nsave: %s\nload: %s\n"
          "save_interval: %d\neval_interval: %d\neval_iters: %d\nlog_interval: %d\n",
          tensor_model_parallel_size, t.seq_length, t.micro_batch_size, t.global_batch_size,
          t.train_iters, lr.max_lr, lr.min_lr, lr.warmup_samples, lr.decay_samples,
          lr.style == train::DecayStyle::kCosine   ? "cosine"
          : lr.style == train::DecayStyle::kLinear ? "linear"
                                                   : "constant",
          weight_decay, clip_grad, t.recompute ? "true" : "false", t.seed, data_path, split, save,
          load, save_interval, eval_interval, t.eval_iters, t.log_interval),
      absl::StrFormat("compute_dtype: %s\nloss_scale: %s\nddp_bucket_size: %d\n"
                      "overlap_grad_reduce: %s\ndevice: %s\ncomm_backend: %s\n",
                      DTypeName(compute_dtype), compute_dtype == DType::kF16 ? "dynamic" : "1",
                      dp_bucket_elements, overlap_grad_reduce ? "true" : "false", device,
                      comm_backend));
}

absl::StatusOr<DataPlan> PlanData(const PretrainConfig& c, const comm::ParallelContext& parallel,
                                  int64_t consumed_samples) {
  DataPlan plan;
  ASSIGN_OR_RETURN(auto indexed, data::IndexedDataset::Open(c.data_path));
  plan.indexed = std::move(indexed);
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

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

// The GPU a rank uses and what it needs there.
struct DeviceSetup {
  Device device = Device::Cpu();
  std::unique_ptr<cuda::DeviceContext> cuda;
  // Every tensor's memory (all kernels run on the default stream, so blocks are reused safely).
  std::unique_ptr<cuda::CachingAllocator> memory_pool;
  std::unique_ptr<comm::Communicator> nccl_world;  // With the NCCL backend.
};

// Collective over `world` when it creates NCCL communicators.
absl::StatusOr<DeviceSetup> SetUpDevice(const PretrainConfig& c, comm::Communicator& world) {
  DeviceSetup d;
  if (c.device == "cpu") return d;
  const int gpus = cuda::DeviceCount();
  if (gpus < 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device=cuda: no CUDA device here (", cuda::Describe(), ")"));
  }
  // Ranks on this node, as the MPI launcher reports them (all of them when it does not).
  const int local_rank = EnvInt("OMPI_COMM_WORLD_LOCAL_RANK", world.rank());
  const int local_size = EnvInt("OMPI_COMM_WORLD_LOCAL_SIZE", world.size());
  const int index = local_rank % gpus;
  d.device = Device::Cuda(index);
  ASSIGN_OR_RETURN(d.cuda, cuda::DeviceContext::Create(index));
  d.memory_pool =
      std::make_unique<cuda::CachingAllocator>(cuda::CachingAllocator::CudaBackend(index));
  // auto: NCCL when the binary has it and every local rank has its own GPU; else MPI (staged
  // through host memory).
  const bool nccl = c.comm_backend == "nccl" ||
                    (c.comm_backend == "auto" && comm::NcclAvailable() && local_size <= gpus);
  if (nccl) {
    ASSIGN_OR_RETURN(d.nccl_world, comm::CreateNcclCommunicator(world, index, comm::NcclOptions(),
                                                                "world"));
  }
  return d;
}

}  // namespace

absl::StatusOr<PretrainResult> RunPretraining(
    const PretrainConfig& c, const std::function<std::unique_ptr<PretrainModel>()>& make_model,
    comm::Communicator& world, const std::atomic<bool>* stop) {
  RETURN_IF_ERROR(c.Validate(world.size()));
  ASSIGN_OR_RETURN(DeviceSetup dev, SetUpDevice(c, world));
  comm::ParallelConfig pc;
  pc.tensor_parallel = c.tensor_model_parallel_size;
  comm::Communicator& comm_world = dev.nccl_world != nullptr ? *dev.nccl_world : world;
  ASSIGN_OR_RETURN(auto parallel,
                   comm::ParallelContext::Create(comm_world, pc, c.model.num_attention_heads));
  const bool rank0 = parallel->rank() == 0;
  const bool verbose = rank0 && !c.trainer.quiet;
  if (verbose) {
    std::printf("------------------------ arguments ------------------------\n%s"
                "world_size: %d (data-parallel size %d)\n"
                "-------------------- end of arguments ---------------------\n",
                c.DebugString().c_str(), parallel->world_size(), parallel->dp_size());
  }
  int threads = c.threads;
  if (threads <= 0) {
    // Share the cores among the ranks of this machine (all ranks assumed local when unknown).
    threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / world.size());
  }
  ThreadPool pool(threads);
  ExecContext ec;
  ec.pool = &pool;
  ec.device = dev.device;
  ec.cuda = dev.cuda.get();  // Kernels on the default stream (what comm/ and core/alloc assume).
  ec.memory_pool = dev.memory_pool.get();
  if (verbose && !dev.device.is_cpu()) {
    std::printf("device: %s (of %d on this node), communicators: %s\n",
                dev.device.ToString().c_str(), cuda::DeviceCount(),
                dev.nccl_world != nullptr ? "nccl" : "mpi (CUDA tensors staged through host memory)");
  }

  // Model, optimizer, schedule.
  nn::ParameterStore store(parallel->tp_rank(), parallel->tp_size(), c.compute_dtype, dev.device);
  const std::unique_ptr<PretrainModel> owned_job = make_model();
  PretrainModel& job = *owned_job;
  RETURN_IF_ERROR(job.CreateModel(&store));
  RETURN_IF_ERROR(store.Allocate(c.trainer.seed));
  train::OptimizerConfig oc;
  oc.weight_decay = static_cast<float>(c.weight_decay);
  oc.clip_grad = c.clip_grad;
  oc.dp_bucket_elements = c.dp_bucket_elements;
  oc.overlap_grad_reduce = c.overlap_grad_reduce;
  ASSIGN_OR_RETURN(train::Optimizer optimizer, train::Optimizer::Create(&store, oc));
  train::LrSchedule schedule(c.lr);
  train::LossScalerConfig scaler_config;
  scaler_config.dynamic = c.compute_dtype == DType::kF16;  // bf16 and f32 need no loss scaling.
  train::LossScaler scaler(scaler_config);
  train::TrainingCounters counters;
  counters.seed = c.trainer.seed;
  if (!c.load.empty()) {
    absl::Status s = train::LoadTrainingState(c.load, *parallel, c.model, &store, &optimizer,
                                              &scaler, &schedule, &counters);
    if (s.ok()) {
      if (verbose) {
        std::printf("loaded checkpoint from %s at iteration %lld (consumed samples %lld)\n",
                    c.load.c_str(), static_cast<long long>(counters.iteration),
                    static_cast<long long>(counters.consumed_samples));
      }
    } else if (absl::IsNotFound(s)) {
      if (verbose) std::printf("no checkpoint in %s: starting from scratch\n", c.load.c_str());
    } else {
      return s;
    }
  }

  // Data. Every evaluation scores the same first eval_iters micro-steps of the validation split.
  ASSIGN_OR_RETURN(std::unique_ptr<train::TrainingTask> task,
                   job.CreateTask(*parallel, counters.consumed_samples));
  bool has_valid = false;
  if (c.trainer.eval_iters > 0) {
    absl::Status v = task->StartValidation();
    has_valid = v.ok();
    if (!has_valid && verbose) {
      std::printf("no validation data (%s): evaluation disabled\n",
                  std::string(v.message()).c_str());
    }
  }

  train::TrainerConfig tc = c.trainer;
  if (!rank0) tc.log_jsonl.clear();
  train::Trainer trainer(tc, parallel.get(), &ec, task.get(), &store, &optimizer, &schedule,
                         &scaler);
  trainer.set_consumed_samples(counters.consumed_samples);
  trainer.set_skipped_iterations(counters.skipped_iterations);
  auto save = [&](int64_t iteration) -> absl::Status {
    train::TrainingCounters now = counters;
    now.iteration = iteration;
    now.consumed_samples = trainer.consumed_samples();
    now.skipped_iterations = trainer.skipped_iterations();
    RETURN_IF_ERROR(train::SaveTrainingState(c.save, c.keep_last, *parallel, c.model, store,
                                             optimizer, scaler, schedule, now));
    if (verbose) {
      std::printf("saved checkpoint at iteration %lld to %s\n", static_cast<long long>(iteration),
                  c.save.c_str());
    }
    return absl::OkStatus();
  };
  auto evaluate = [&](const std::string& when) -> absl::StatusOr<train::EvalResult> {
    ASSIGN_OR_RETURN(train::EvalResult e, trainer.Evaluate());
    if (verbose) {
      std::printf(" validation %s%s | lm loss PPL: %.6E\n", when.c_str(),
                  trainer.FormatLosses(e.loss).c_str(), e.perplexity);
    }
    return e;
  };
  auto on_iteration = [&](int64_t iteration) -> absl::Status {
    if (has_valid && c.eval_interval > 0 && iteration % c.eval_interval == 0) {
      RETURN_IF_ERROR(
          evaluate(absl::StrCat("at iteration ", iteration)).status());
    }
    if (!c.save.empty() && c.save_interval > 0 && iteration % c.save_interval == 0 &&
        iteration < c.trainer.train_iters) {
      return save(iteration);
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(trainer.Train(counters.iteration, stop, on_iteration));

  PretrainResult result;
  result.iterations = trainer.iteration();
  result.stopped_by_signal = trainer.stopped_early();
  if (!trainer.history().empty()) {
    result.first = trainer.history().front().loss;
    result.last = trainer.history().back().loss;
  }
  if (!c.save.empty() && (result.stopped_by_signal || trainer.iteration() > counters.iteration)) {
    RETURN_IF_ERROR(save(trainer.iteration()));
  }
  if (result.stopped_by_signal) return result;
  if (has_valid) {
    ASSIGN_OR_RETURN(result.valid, evaluate("at the end"));
    result.has_valid = true;
  }
  nn::StepContext sc;
  sc.exec = &ec;
  sc.tp = parallel->tp_size() > 1 ? &parallel->tp() : nullptr;
  sc.mode = nn::Mode::kEval;
  RETURN_IF_ERROR(job.AfterTraining(sc, rank0));
  return result;
}

}  // namespace experiments
}  // namespace mt
