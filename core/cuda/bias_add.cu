// Bias add: one thread per element, vector-friendly grid-stride loop. Math in f32.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "core/cuda/launchers.h"

namespace mt {
namespace cuda {
namespace {

__device__ __forceinline__ float Load(const float* p) { return *p; }
__device__ __forceinline__ float Load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ float Load(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ void Store(float* p, float v) { *p = v; }
__device__ __forceinline__ void Store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void Store(__half* p, float v) { *p = __float2half_rn(v); }

template <typename T>
__global__ void BiasAddKernel(const T* x, const T* bias, T* y, int64_t n, int64_t cols) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    Store(y + i, Load(x + i) + Load(bias + i % cols));
  }
}

template <typename T>
int Launch(const void* x, const void* bias, void* y, int64_t rows, int64_t cols, void* stream) {
  const int64_t n = rows * cols;
  if (n == 0) return 0;
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  const int grid = static_cast<int>(blocks < 65535 * 8 ? blocks : 65535 * 8);
  BiasAddKernel<T><<<grid, threads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const T*>(x), static_cast<const T*>(bias), static_cast<T*>(y), n, cols);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int LaunchBiasAdd(ElemType type, const void* x, const void* bias, void* y, int64_t rows,
                  int64_t cols, void* stream) {
  switch (type) {
    case ElemType::kF32:
      return Launch<float>(x, bias, y, rows, cols, stream);
    case ElemType::kBF16:
      return Launch<__nv_bfloat16>(x, bias, y, rows, cols, stream);
    case ElemType::kF16:
      return Launch<__half>(x, bias, y, rows, cols, stream);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace cuda
}  // namespace mt
