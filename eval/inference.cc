#include "eval/inference.h"

#include <algorithm>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/alloc.h"
#include "core/cuda_device.h"
#include "core/status.h"
#include "models/registry.h"
#include "train/checkpoint.h"

namespace mt {
namespace eval {

nn::StepContext InferenceSession::Step() const {
  nn::StepContext sc;
  sc.exec = &exec;
  sc.tp = tp;
  sc.mode = nn::Mode::kEval;
  return sc;
}

namespace {

// The device, the memory pool and the threads of this rank.
absl::Status SetUpExecution(const InferenceConfig& c, int local_rank, int local_size,
                            InferenceSession* s) {
  const int threads = c.threads > 0
                          ? c.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) /
                                            std::max(1, local_size));
  s->pool = std::make_unique<ThreadPool>(threads);
  s->exec.pool = s->pool.get();
  if (c.device == DeviceType::kCpu) return absl::OkStatus();
  const int gpus = cuda::DeviceCount();
  if (gpus < 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device=cuda: no CUDA device here (", cuda::Describe(), ")"));
  }
  const int index = local_rank % gpus;
  ASSIGN_OR_RETURN(s->cuda, cuda::DeviceContext::Create(index));
  s->memory_pool =
      std::make_unique<cuda::CachingAllocator>(cuda::CachingAllocator::CudaBackend(index));
  s->exec.device = Device::Cuda(index);
  s->exec.cuda = s->cuda.get();  // The default stream, as the copies in core/alloc.h assume.
  s->exec.memory_pool = s->memory_pool.get();
  return absl::OkStatus();
}

// Reads this rank's shard of `iteration` into the store's masters. The training checkpoint also
// holds the Adam moments of every parameter ("optimizer.exp_avg.<name>", "...exp_avg_sq...");
// LoadShard reads exactly the tensors it is given, so they go to scratch that is dropped.
absl::Status ReadWeights(const std::string& dir, int64_t iteration,
                         const models::ModelConfig& config, const ExecContext& exec,
                         nn::ParameterStore* store) {
  const nn::ParameterStore& st = *store;
  Tensor values = Tensor::Host({st.NumLocalElements()}, DType::kF32);
  Tensor moments = Tensor::Host({2, st.NumLocalElements()}, DType::kF32);
  std::vector<train::TensorRecord> into;
  for (int i = 0; i < st.size(); ++i) {
    const nn::ParamSpec& spec = st.spec(i);
    const Shape& local = st.value(i).shape;
    float* targets[3] = {values.data_as<float>() + st.offset(i),
                         moments.data_as<float>() + st.offset(i),
                         moments.data_as<float>() + st.NumLocalElements() + st.offset(i)};
    const std::string names[3] = {spec.name, "optimizer.exp_avg." + spec.name,
                                  "optimizer.exp_avg_sq." + spec.name};
    for (int k = 0; k < 3; ++k) {
      into.push_back({names[k], spec.global_shape, spec.split_dim, spec.vocab_padded,
                      TensorView(targets[k], local, DType::kF32)});
    }
  }
  RETURN_IF_ERROR(train::LoadShard(dir, iteration, st.tp_rank(), st.tp_size(), config.ToJson(),
                                   into, /*meta=*/nullptr));
  return store->CopyValuesFromHost(exec, values.view());  // Also refreshes the compute copies.
}

}  // namespace

absl::StatusOr<std::unique_ptr<InferenceSession>> LoadForInference(const InferenceConfig& config,
                                                                   comm::Communicator& world,
                                                                   int local_rank, int local_size) {
  if (config.load.empty()) return absl::InvalidArgumentError("--load is required");
  ASSIGN_OR_RETURN(const int64_t iteration, train::LatestIteration(config.load));
  ASSIGN_OR_RETURN(const train::CheckpointMetadata meta,
                   train::ReadShardMetadata(config.load, iteration, 0));
  if (meta.tp_size != world.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", config.load, " has tensor_model_parallel_size ", meta.tp_size, " but ",
        world.size(), " rank(s) run: launch ", meta.tp_size,
        " (mpirun -np N), or convert it with bazel run //train:reshard_checkpoint -- --load=",
        config.load, " --save=<new dir> --tensor_model_parallel_size=", world.size()));
  }
  ASSIGN_OR_RETURN(const models::ModelConfig model_config,
                   models::ModelConfig::FromJson(meta.model_config_json));
  auto s = std::make_unique<InferenceSession>();
  RETURN_IF_ERROR(SetUpExecution(config, local_rank, local_size, s.get()));
  s->tp = world.size() > 1 ? &world : nullptr;
  s->iteration = iteration;
  s->store = std::make_unique<nn::ParameterStore>(
      world.rank(), world.size(), config.bf16 ? DType::kBF16 : DType::kF32, s->exec.device);
  ASSIGN_OR_RETURN(s->model, models::CreateModel(model_config, s->store.get()));
  RETURN_IF_ERROR(s->store->Allocate(/*seed=*/0));  // Overwritten by the checkpoint.
  RETURN_IF_ERROR(ReadWeights(config.load, iteration, model_config, s->exec, s->store.get()));
  return s;
}

}  // namespace eval
}  // namespace mt
