// What an op needs besides its tensors: the CPU thread pool and the CUDA stream. Created by the
// caller (a test, a trainer) and passed to every op; never global.
#ifndef MT_CORE_EXEC_CONTEXT_H_
#define MT_CORE_EXEC_CONTEXT_H_

#include "core/thread_pool.h"

namespace mt {

struct ExecContext {
  // CPU kernels split their work over this pool; null runs them on the calling thread.
  ThreadPool* pool = nullptr;
  // CUDA kernels are launched on this cudaStream_t (null: the default stream).
  void* cuda_stream = nullptr;

  int num_threads() const { return pool == nullptr ? 1 : pool->num_threads(); }
};

}  // namespace mt

#endif  // MT_CORE_EXEC_CONTEXT_H_
