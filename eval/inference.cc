#include "eval/inference.h"

#include <algorithm>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/alloc.h"
#include "core/cuda_device.h"
#include "core/status.h"
#include "train/model_loading.h"

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

}  // namespace

absl::StatusOr<std::unique_ptr<InferenceSession>> LoadForInference(const InferenceConfig& config,
                                                                   comm::Communicator& world,
                                                                   int local_rank, int local_size) {
  if (config.load.empty()) return absl::InvalidArgumentError("--load is required");
  auto s = std::make_unique<InferenceSession>();
  RETURN_IF_ERROR(SetUpExecution(config, local_rank, local_size, s.get()));
  s->tp = world.size() > 1 ? &world : nullptr;
  train::LoadModelOptions options;
  options.compute_dtype = config.bf16 ? DType::kBF16 : DType::kF32;
  ASSIGN_OR_RETURN(train::LoadedModel loaded,
                   train::LoadModel(config.load, world.rank(), world.size(), s->exec, options));
  s->iteration = loaded.checkpoint.iteration;
  s->model_name = loaded.checkpoint.model_name;
  s->store = std::move(loaded.store);
  s->model = std::move(loaded.model);
  return s;
}

}  // namespace eval
}  // namespace mt
