// The Status of a failed CUDA runtime call, and MT_CUDA_RETURN_IF_ERROR, for every piece of CUDA
// host code (core/cuda_device.cc, core/cuda, comm's NCCL backend). Includes cuda_runtime.h: include
// only from sources compiled in CUDA builds.
#ifndef MT_CORE_CUDA_ERROR_H_
#define MT_CORE_CUDA_ERROR_H_

#include <cuda_runtime.h>

#include "absl/status/status.h"

namespace mt {
namespace cuda {

// "<file>:<line>: <expr> failed: <name> (<text>); <hint>". Out-of-memory becomes
// ResourceExhausted, everything else Internal; the (non-sticky) error is cleared so that later
// calls are not blamed for it.
absl::Status CudaCallError(cudaError_t err, const char* expr, const char* file, int line);

}  // namespace cuda
}  // namespace mt

#define MT_CUDA_RETURN_IF_ERROR(expr)                                            \
  do {                                                                           \
    const cudaError_t mt_cuda_err_ = (expr);                                     \
    if (mt_cuda_err_ != cudaSuccess) {                                           \
      return ::mt::cuda::CudaCallError(mt_cuda_err_, #expr, __FILE__, __LINE__); \
    }                                                                            \
  } while (0)

#endif  // MT_CORE_CUDA_ERROR_H_
