// What one process (rank) computes with: a thread pool that shares this machine's cores with the
// other ranks on it and, on a GPU, the device local_rank mod the GPUs here, its DeviceContext and
// a caching allocator; `exec` runs ops on them (kernels on the default stream, as core/alloc.h and
// comm/ assume). Every driver, harness and benchmark sets its rank up through this.
#ifndef MT_CORE_RANK_EXECUTION_H_
#define MT_CORE_RANK_EXECUTION_H_

#include <memory>

#include "absl/status/statusor.h"
#include "core/cuda/caching_allocator.h"
#include "core/cuda/device_context.h"
#include "core/exec_context.h"
#include "core/thread_pool.h"

namespace mt {

struct RankExecutionOptions {
  bool cuda = false;   // On the GPU local_rank mod the GPUs here; the CPU otherwise.
  int threads = 0;     // 0: the hardware threads / local_size, at least 1.
  int local_rank = 0;  // This process among the ranks on its machine.
  int local_size = 1;
  bool caching_allocator = true;  // GPU memory through a CachingAllocator (else cudaMalloc).
};

// Movable: exec points at the heap objects the struct owns, not at the struct.
struct RankExecution {
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<cuda::DeviceContext> cuda;            // On a GPU.
  std::unique_ptr<cuda::CachingAllocator> memory_pool;  // On a GPU with caching_allocator.
  ExecContext exec;
  int threads = 1;
};

// FailedPrecondition "--device=cuda: no CUDA device here (...)" for options.cuda on a machine
// without a usable GPU; DeviceContext::Create's errors.
absl::StatusOr<RankExecution> CreateRankExecution(const RankExecutionOptions& options);

// The thread count of a rank: `threads` when > 0, else the hardware threads / local_size (>= 1).
int ThreadsPerRank(int threads, int local_size);

}  // namespace mt

#endif  // MT_CORE_RANK_EXECUTION_H_
