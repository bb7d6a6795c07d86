// CUDA build: thin checked wrappers over the CUDA runtime.
#include "core/cuda_device.h"

#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "core/cuda_error.h"

namespace mt {
namespace cuda {

bool BuiltWithCuda() { return true; }

int DeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // Clear the sticky "no driver / no device" error.
    return 0;
  }
  return n;
}

std::string Describe() {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::StrCat("no CUDA device: ", cudaGetErrorString(err));
  }
  if (n == 0) return "no CUDA device";
  std::string out;
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, i) == cudaSuccess) {
      absl::StrAppend(&out, i ? "; " : "", "cuda:", i, " ", prop.name, " (sm_", prop.major,
                      prop.minor, ", ", prop.totalGlobalMem >> 20, " MiB)");
    }
  }
  return out;
}

absl::StatusOr<void*> Malloc(int device, size_t nbytes) {
  MT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, nbytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(
        absl::StrCat("cuda:", device, " out of memory allocating ", nbytes, " bytes"));
  }
  if (err != cudaSuccess) return CudaCallError(err, "cudaMalloc", __FILE__, __LINE__);
  return p;
}

void Free(int device, void* ptr) {
  cudaSetDevice(device);
  cudaFree(ptr);
}

absl::Status Memcpy(void* dst, const void* src, size_t nbytes, CopyKind kind) {
  const cudaMemcpyKind k = kind == CopyKind::kHostToDevice   ? cudaMemcpyHostToDevice
                           : kind == CopyKind::kDeviceToHost ? cudaMemcpyDeviceToHost
                                                             : cudaMemcpyDeviceToDevice;
  MT_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, src, nbytes, k));
  return absl::OkStatus();
}

absl::Status Memcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                      size_t height, CopyKind kind) {
  const cudaMemcpyKind k = kind == CopyKind::kHostToDevice   ? cudaMemcpyHostToDevice
                           : kind == CopyKind::kDeviceToHost ? cudaMemcpyDeviceToHost
                                                             : cudaMemcpyDeviceToDevice;
  MT_CUDA_RETURN_IF_ERROR(cudaMemcpy2D(dst, dpitch, src, spitch, width, height, k));
  return absl::OkStatus();
}

absl::Status Synchronize(int device) {
  MT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  MT_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return absl::OkStatus();
}

absl::Status Memset(int device, void* ptr, int value, size_t nbytes) {
  MT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  MT_CUDA_RETURN_IF_ERROR(cudaMemset(ptr, value, nbytes));
  return absl::OkStatus();
}

absl::StatusOr<size_t> MemoryInUse(int device) {
  MT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  size_t free = 0, total = 0;
  MT_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free, &total));
  return total - free;
}

}  // namespace cuda
}  // namespace mt
