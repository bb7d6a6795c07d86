// What an op needs besides its tensors: the CPU thread pool, the CUDA stream and the CUDA device
// resources. Created by the caller (a test, a trainer) and passed to every op; never global.
#ifndef MT_CORE_EXEC_CONTEXT_H_
#define MT_CORE_EXEC_CONTEXT_H_

#include "core/device.h"
#include "core/thread_pool.h"

namespace mt {

namespace cuda {
class DeviceContext;  // core/cuda/device_context.h
}  // namespace cuda
class DeviceMemoryPool;  // core/tensor.h

struct ExecContext {
  // CPU kernels split their work over this pool; null runs them on the calling thread.
  ThreadPool* pool = nullptr;
  // CUDA kernels are launched on this cudaStream_t (null: the default stream).
  void* cuda_stream = nullptr;
  // cuBLASLt handle, workspace and scratch for the CUDA ops that need them (GEMMs, reductions,
  // ops that check ids on the device; core/cuda/device_context.h lists them): one DeviceContext
  // for the tensors' device, used only with cuda_stream. Unused for CPU tensors.
  cuda::DeviceContext* cuda = nullptr;
  // Where the tensors that code above core/ (nn/, models/, train/) creates with this context live:
  // activations, scratch and parameters (core/alloc.h). Ops ignore it: they dispatch on their
  // tensors' devices. For cuda:N, cuda_stream must be the default stream or a blocking stream
  // (host <-> device copies run on the legacy default stream; core/alloc.h), and `cuda` (when
  // set) serves device N.
  Device device = Device::Cpu();
  // Where core/alloc.h takes CUDA memory from (e.g. a cuda::CachingAllocator for `device` used
  // only with cuda_stream); null: cudaMalloc / cudaFree for each tensor.
  DeviceMemoryPool* memory_pool = nullptr;

  // CPU f32 GEMMs with an untransposed A run a kernel whose every output row is computed alone
  // (core/ops/gemm_rows_simd.h): a row's result does not depend on the number or contents of the
  // other rows. For batched decoding (serve/), where each row is a different request; slower
  // than the BLAS for large products. CUDA GEMMs ignore it.
  bool row_invariant_gemm = false;

  int num_threads() const { return pool == nullptr ? 1 : pool->num_threads(); }
};

}  // namespace mt

#endif  // MT_CORE_EXEC_CONTEXT_H_
