#include "core/cuda_error.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace mt {
namespace cuda {

absl::Status CudaCallError(cudaError_t err, const char* expr, const char* file, int line) {
  cudaGetLastError();  // Clear a non-sticky error; sticky ones persist regardless.
  const std::string where =
      absl::StrCat(file, ":", line, ": ", expr, " failed: ", cudaGetErrorName(err), " (",
                   cudaGetErrorString(err), ")");
  if (err == cudaErrorMemoryAllocation) {
    return absl::ResourceExhaustedError(absl::StrCat(
        where, "; the GPU is out of memory: reduce the batch size or free cached memory"));
  }
  return absl::InternalError(absl::StrCat(
      where,
      "; if it names an earlier asynchronous failure, rerun with CUDA_LAUNCH_BLOCKING=1 to "
      "find the kernel that caused it"));
}

}  // namespace cuda
}  // namespace mt
