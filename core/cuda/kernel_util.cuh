// Helpers shared by the .cu files of core/cuda (internal; include only from .cu files): element
// loads and stores with f32 math, launch-error checks, grid sizing, and deterministic warp and
// block reductions (fixed shuffle trees, so a result never depends on scheduling).
#ifndef MT_CORE_CUDA_KERNEL_UTIL_CUH_
#define MT_CORE_CUDA_KERNEL_UTIL_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda/launchers.h"

// A kernel launch: MT_LAUNCH(grid, block, shared_bytes, stream, Kernel<T>)(args...) is
// Kernel<T><<<grid, block, shared_bytes, stream>>>(args...) under nvcc, and a run on the CPU under
// the CUDA emulator (core/cuda/emu/emu.h, --config=cuda_emu), where the kernels are host C++.
// MT_DYNAMIC_SHARED(T, name) declares the block's dynamic shared memory as T name[].
#if defined(MT_CUDA_EMULATION)
#include "core/cuda/emu/emu.h"
#define MT_LAUNCH(grid, block, shared, stream, ...) \
  ::mt::cuda_emu::MakeLauncher(grid, block, shared, stream, __VA_ARGS__, #__VA_ARGS__)
#define MT_DYNAMIC_SHARED(type, name) \
  type* const name = static_cast<type*>(::mt::cuda_emu::DynamicSharedMemory())
#else
#define MT_LAUNCH(grid, block, shared, stream, ...) __VA_ARGS__<<<grid, block, shared, stream>>>
#define MT_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#endif

// Returns the pending CUDA error, if any, as a LaunchResult naming this line. Use after every
// kernel launch.
#define MT_CHECK_LAUNCH()                                                                    \
  do {                                                                                       \
    const cudaError_t mt_launch_err_ = cudaGetLastError();                                   \
    if (mt_launch_err_ != cudaSuccess) {                                                     \
      return ::mt::cuda::LaunchResult{static_cast<int>(mt_launch_err_), __FILE__, __LINE__}; \
    }                                                                                        \
  } while (0)

// Checks the cudaError_t of a runtime call made by a launcher.
#define MT_CHECK_CUDA_CALL(expr)                                                           \
  do {                                                                                     \
    const cudaError_t mt_call_err_ = (expr);                                               \
    if (mt_call_err_ != cudaSuccess) {                                                     \
      return ::mt::cuda::LaunchResult{static_cast<int>(mt_call_err_), __FILE__, __LINE__}; \
    }                                                                                      \
  } while (0)

// Propagates a failed LaunchResult from a helper.
#define MT_RETURN_IF_LAUNCH_FAILED(expr)                \
  do {                                                  \
    const ::mt::cuda::LaunchResult mt_result_ = (expr); \
    if (!mt_result_.ok()) return mt_result_;            \
  } while (0)

namespace mt {
namespace cuda {
namespace internal {

constexpr int kWarp = 32;
constexpr int kThreads = 256;  // Default block size.

__device__ __forceinline__ float Load(const float* p) { return *p; }
__device__ __forceinline__ float Load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ float Load(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ void Store(float* p, float v) { *p = v; }
__device__ __forceinline__ void Store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void Store(__half* p, float v) { *p = __float2half_rn(v); }

template <typename I>
__device__ __forceinline__ int64_t LoadId(const I* p) {
  return static_cast<int64_t>(*p);
}

// Global thread index and grid stride for grid-stride loops (64-bit).
__device__ __forceinline__ int64_t GlobalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t GridStride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// Blocks for a grid-stride loop over n items with `threads` per block: enough to fill any current
// GPU, capped so that huge tensors loop instead of launching millions of blocks.
inline int GridFor(int64_t n, int threads = kThreads) {
  const int64_t blocks = (n + threads - 1) / threads;
  constexpr int64_t kMaxBlocks = 1 << 16;
  return static_cast<int>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

// Calls fn(Tag<T>{}) with T the device type of an element type.
template <typename T>
struct Tag {
  using type = T;
};
template <typename Fn>
LaunchResult DispatchElem(ElemType type, Fn&& fn) {
  switch (type) {
    case ElemType::kF32:
      return fn(Tag<float>{});
    case ElemType::kBF16:
      return fn(Tag<__nv_bfloat16>{});
    case ElemType::kF16:
      return fn(Tag<__half>{});
  }
  return LaunchResult{static_cast<int>(cudaErrorInvalidValue), __FILE__, __LINE__};
}
template <typename Fn>
LaunchResult DispatchId(IdType type, Fn&& fn) {
  return type == IdType::kI32 ? fn(Tag<int32_t>{}) : fn(Tag<int64_t>{});
}

// fn(Tag<T>{}, Tag<I>{}) for an element type and an id type together.
template <typename Fn>
LaunchResult DispatchElemAndId(ElemType type, IdType id_type, Fn&& fn) {
  return DispatchElem(type, [&](auto tag) -> LaunchResult {
    return DispatchId(id_type, [&](auto id_tag) -> LaunchResult { return fn(tag, id_tag); });
  });
}

struct SumOp {
  template <typename V>
  __device__ __forceinline__ V operator()(V a, V b) const {
    return a + b;
  }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Butterfly reduction over the 32 lanes of a full warp; every lane gets the result.
template <typename V, typename Op>
__device__ __forceinline__ V WarpReduce(V v, Op op) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// Reduction over a whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the
// result. `shared` holds 32 values. Contains __syncthreads: call from all threads of the block.
template <typename V, typename Op>
__device__ __forceinline__ V BlockReduce(V v, Op op, V identity, V* shared) {
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const int warps = blockDim.x / kWarp;
  v = WarpReduce(v, op);
  __syncthreads();  // `shared` may still be read from a previous call.
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : identity;
  return WarpReduce(v, op);
}

}  // namespace internal

// The helpers every kernel file uses, by their short names in mt::cuda (where the kernel files
// put their kernels). Only kernel files include this header, so host code never sees them.
using internal::BlockReduce;
using internal::GlobalThread;
using internal::GridFor;
using internal::GridStride;
using internal::kThreads;
using internal::kWarp;
using internal::Load;
using internal::MaxOp;
using internal::Store;
using internal::SumOp;
using internal::WarpReduce;

}  // namespace cuda
}  // namespace mt

#endif  // MT_CORE_CUDA_KERNEL_UTIL_CUH_
