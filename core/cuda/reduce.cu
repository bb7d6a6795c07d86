// Whole-tensor reductions to one double: phase 1 has a fixed number of blocks for a given n, each
// thread accumulating a fixed strided subset in f64 and each block reducing in a fixed tree;
// phase 2 reduces the block results in one block. The result depends only on n and the data.
#include <cmath>

#include "core/cuda/kernel_util.cuh"

namespace mt {
namespace cuda {
namespace {

constexpr int64_t kMaxBlocks = 1024;
constexpr int64_t kItemsPerThread = 8;

int64_t Blocks(int64_t n) {
  const int64_t b = (n + kThreads * kItemsPerThread - 1) / (kThreads * kItemsPerThread);
  return b < kMaxBlocks ? b : kMaxBlocks;
}

struct SumCombine {
  __device__ __forceinline__ double operator()(double a, double b) const { return a + b; }
};
// Max that propagates NaN (any NaN element makes the result NaN, as on the CPU).
struct MaxCombine {
  __device__ __forceinline__ double operator()(double a, double b) const {
    return (isnan(a) || isnan(b)) ? NAN : fmax(a, b);
  }
};

template <ReduceOp kOp>
__device__ __forceinline__ double Term(float v) {
  const double d = v;
  return kOp == ReduceOp::kSumOfSquares ? d * d : d;  // Exact: 24-bit significands squared fit.
}

template <typename T, ReduceOp kOp, typename Combine>
__global__ void ReducePartialKernel(const T* x, int64_t n, double identity, double* partial) {
  __shared__ double shared[32];
  double acc = identity;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    acc = Combine()(acc, Term<kOp>(Load(x + i)));
  }
  acc = BlockReduce(acc, Combine(), identity, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

template <typename Combine>
__global__ void ReduceFinishKernel(const double* partial, int64_t count, double identity,
                                   double* out) {
  __shared__ double shared[32];
  double acc = identity;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) acc = Combine()(acc, partial[i]);
  acc = BlockReduce(acc, Combine(), identity, shared);
  if (threadIdx.x == 0) *out = acc;
}

template <typename T, ReduceOp kOp, typename Combine>
LaunchResult Launch(const T* x, int64_t n, double identity, double* scratch, cudaStream_t s) {
  const int64_t blocks = Blocks(n);
  double* partial = scratch + 1;
  if (blocks > 0) {
    MT_LAUNCH(static_cast<unsigned>(blocks), kThreads, 0, s, ReducePartialKernel<T, kOp, Combine>)
    (x, n, identity, partial);
    MT_CHECK_LAUNCH();
  }
  MT_LAUNCH(1, 1024, 0, s, ReduceFinishKernel<Combine>)(partial, blocks, identity, scratch);
  MT_CHECK_LAUNCH();
  return {};
}

}  // namespace

int64_t ReduceScratchDoubles(int64_t n) { return 1 + Blocks(n); }

LaunchResult LaunchReduce(ElemType type, ReduceOp op, const void* x, int64_t n, double* scratch,
                          void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  return internal::DispatchElem(type, [&](auto tag) -> LaunchResult {
    using T = typename decltype(tag)::type;
    const T* px = static_cast<const T*>(x);
    switch (op) {
      case ReduceOp::kSum:
        return Launch<T, ReduceOp::kSum, SumCombine>(px, n, 0.0, scratch, s);
      case ReduceOp::kSumOfSquares:
        return Launch<T, ReduceOp::kSumOfSquares, SumCombine>(px, n, 0.0, scratch, s);
      case ReduceOp::kMax:
        return Launch<T, ReduceOp::kMax, MaxCombine>(px, n, -INFINITY, scratch, s);
    }
    return LaunchResult{static_cast<int>(cudaErrorInvalidValue), __FILE__, __LINE__};
  });
}

}  // namespace cuda
}  // namespace mt
