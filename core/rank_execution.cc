#include "core/rank_execution.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/cuda_device.h"
#include "core/status.h"

namespace mt {

int ThreadsPerRank(int threads, int local_size) {
  if (threads > 0) return threads;
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, cores / std::max(1, local_size));
}

absl::StatusOr<RankExecution> CreateRankExecution(const RankExecutionOptions& options) {
  RankExecution r;
  r.threads = ThreadsPerRank(options.threads, options.local_size);
  r.pool = std::make_unique<ThreadPool>(r.threads);
  r.exec.pool = r.pool.get();
  if (!options.cuda) return r;
  const int gpus = cuda::DeviceCount();
  if (gpus < 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device=cuda: no CUDA device here (", cuda::Describe(), ")"));
  }
  const int index = options.local_rank % gpus;
  ASSIGN_OR_RETURN(r.cuda, cuda::DeviceContext::Create(index));
  r.exec.device = Device::Cuda(index);
  r.exec.cuda = r.cuda.get();
  if (options.caching_allocator) {
    r.memory_pool =
        std::make_unique<cuda::CachingAllocator>(cuda::CachingAllocator::CudaBackend(index));
    r.exec.memory_pool = r.memory_pool.get();
  }
  return r;
}

}  // namespace mt
