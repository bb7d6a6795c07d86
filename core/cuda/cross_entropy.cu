// Softmax cross-entropy (core/ops/cross_entropy.h) and the per-rank phases of the vocab-parallel
// version (core/ops/sharded_cross_entropy.h): one block per row, block reductions in a fixed tree,
// the same precisions as the CPU kernels (row max in f32, sums of exponentials in f64).
#include <cmath>

#include "core/cuda/kernel_util.cuh"

namespace mt {
namespace cuda {
namespace {

constexpr int64_t kIgnore = -100;  // ops::kIgnoreIndex

struct RowStats {
  float max;
  double sum_exp;  // sum_j exp(x_j - max), of f32 exponentials
};

// Contains __syncthreads: every thread of the block calls it for the same row.
template <typename T>
__device__ RowStats Stats(const T* x, int64_t v, float* fshared, double* dshared) {
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) mx = fmaxf(mx, Load(x + j));
  mx = BlockReduce(mx, MaxOp(), -INFINITY, fshared);
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
    s += static_cast<double>(expf(Load(x + j) - mx));
  }
  s = BlockReduce(s, SumOp(), 0.0, dshared);
  return {mx, s};
}

template <typename T, typename I>
__global__ void CrossEntropyKernel(const T* logits, const I* targets, float* losses, int64_t v) {
  __shared__ float fshared[32];
  __shared__ double dshared[32];
  const int64_t n = blockIdx.x;
  const int64_t t = static_cast<int64_t>(targets[n]);
  if (t == kIgnore) {
    if (threadIdx.x == 0) losses[n] = 0.0f;
    return;  // Uniform across the block.
  }
  const T* x = logits + n * v;
  const RowStats st = Stats(x, v, fshared, dshared);
  if (threadIdx.x == 0) {
    // (max - x_t) is exact in f64, so the loss keeps its relative accuracy when it is small.
    const double max_minus_target = static_cast<double>(st.max) - static_cast<double>(Load(x + t));
    losses[n] = static_cast<float>(log(st.sum_exp) + max_minus_target);
  }
}

template <typename T, typename I>
__global__ void CrossEntropyBackwardKernel(const T* logits, const I* targets, const float* dlosses,
                                           T* dlogits, int64_t v) {
  __shared__ float fshared[32];
  __shared__ double dshared[32];
  const int64_t n = blockIdx.x;
  const int64_t t = static_cast<int64_t>(targets[n]);
  const T* x = logits + n * v;
  T* dx = dlogits + n * v;  // May be x: the statistics are complete before anything is written.
  if (t == kIgnore) {
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) Store(dx + j, 0.0f);
    return;
  }
  const RowStats st = Stats(x, v, fshared, dshared);
  const float dl = dlosses[n];
  const float scale = static_cast<float>(1.0 / st.sum_exp) * dl;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
    const float g = expf(Load(x + j) - st.max) * scale;
    Store(dx + j, j == t ? g - dl : g);
  }
}

__global__ void ShardedRowMaxKernel(const float* logits, float* row_max, int64_t v, int64_t valid) {
  __shared__ float fshared[32];
  const float* l = logits + static_cast<int64_t>(blockIdx.x) * v;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) mx = fmaxf(mx, l[j]);
  mx = BlockReduce(mx, MaxOp(), -INFINITY, fshared);
  if (threadIdx.x == 0) row_max[blockIdx.x] = mx;
}

template <typename I>
__global__ void ShardedTargetAndSumExpKernel(const float* logits, const I* targets,
                                             const float* row_max, float* partials, int64_t v,
                                             int64_t valid, int64_t vocab_start) {
  __shared__ double dshared[32];
  const int64_t n = blockIdx.x;
  const float* l = logits + n * v;
  const float m = row_max[n];
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) {
    s += exp(static_cast<double>(l[j] - m));
  }
  s = BlockReduce(s, SumOp(), 0.0, dshared);
  if (threadIdx.x == 0) {
    const int64_t t = static_cast<int64_t>(targets[n]) - vocab_start;
    partials[2 * n] = (t >= 0 && t < valid) ? l[t] : 0.0f;
    partials[2 * n + 1] = static_cast<float>(s);
  }
}

template <typename I>
__global__ void ShardedLossKernel(const I* targets, const float* row_max, const float* partials,
                                  float* losses, int64_t n) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    losses[i] = static_cast<int64_t>(targets[i]) == kIgnore
                    ? 0.0f
                    : static_cast<float>(log(static_cast<double>(partials[2 * i + 1])) +
                                         row_max[i] - partials[2 * i]);
  }
}

template <typename I>
__global__ void ShardedBackwardKernel(const float* logits, const I* targets, const float* row_max,
                                      const float* partials, const float* dlosses, float* dlogits,
                                      int64_t v, int64_t valid, int64_t vocab_start) {
  const int64_t n = blockIdx.x;
  const float* l = logits + n * v;
  float* d = dlogits + n * v;  // May be l: each element is read before it is written.
  const int64_t target = static_cast<int64_t>(targets[n]);
  if (target == kIgnore) {
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) d[j] = 0.0f;
    return;
  }
  const int64_t t = target - vocab_start;
  const float m = row_max[n];
  const double inv = 1.0 / partials[2 * n + 1];
  const double dl = dlosses[n];
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
    if (j >= valid) {
      d[j] = 0.0f;
      continue;
    }
    const double s = exp(static_cast<double>(l[j] - m)) * inv;
    d[j] = static_cast<float>((s - (j == t ? 1.0 : 0.0)) * dl);
  }
}

// One block per row.
inline unsigned Rows(int64_t n) { return static_cast<unsigned>(n); }

}  // namespace

LaunchResult LaunchCrossEntropy(ElemType type, IdType id_type, const void* logits,
                                const void* targets, float* losses, int64_t n, int64_t v,
                                void* stream) {
  if (n == 0) return {};
  auto s = static_cast<cudaStream_t>(stream);
  return internal::DispatchElemAndId(type, id_type, [&](auto tag, auto id_tag) -> LaunchResult {
    using T = typename decltype(tag)::type;
    using I = typename decltype(id_tag)::type;
    MT_LAUNCH(Rows(n), kThreads, 0, s, CrossEntropyKernel<T, I>)
    (static_cast<const T*>(logits), static_cast<const I*>(targets), losses, v);
    MT_CHECK_LAUNCH();
    return {};
  });
}

LaunchResult LaunchCrossEntropyBackward(ElemType type, IdType id_type, const void* logits,
                                        const void* targets, const float* dlosses, void* dlogits,
                                        int64_t n, int64_t v, void* stream) {
  if (n == 0) return {};
  auto s = static_cast<cudaStream_t>(stream);
  return internal::DispatchElemAndId(type, id_type, [&](auto tag, auto id_tag) -> LaunchResult {
    using T = typename decltype(tag)::type;
    using I = typename decltype(id_tag)::type;
    MT_LAUNCH(Rows(n), kThreads, 0, s, CrossEntropyBackwardKernel<T, I>)
    (static_cast<const T*>(logits), static_cast<const I*>(targets), dlosses,
     static_cast<T*>(dlogits), v);
    MT_CHECK_LAUNCH();
    return {};
  });
}

LaunchResult LaunchShardedRowMax(const float* logits, float* row_max, int64_t n, int64_t v,
                                 int64_t valid, void* stream) {
  if (n == 0) return {};
  MT_LAUNCH(Rows(n), kThreads, 0, static_cast<cudaStream_t>(stream), ShardedRowMaxKernel)
  (logits, row_max, v, valid);
  MT_CHECK_LAUNCH();
  return {};
}

LaunchResult LaunchShardedTargetAndSumExp(IdType id_type, const float* logits, const void* targets,
                                          const float* row_max, float* partials, int64_t n,
                                          int64_t v, int64_t valid, int64_t vocab_start,
                                          void* stream) {
  if (n == 0) return {};
  return internal::DispatchId(id_type, [&](auto tag) -> LaunchResult {
    using I = typename decltype(tag)::type;
    MT_LAUNCH(Rows(n), kThreads, 0, static_cast<cudaStream_t>(stream),
              ShardedTargetAndSumExpKernel<I>)
    (logits, static_cast<const I*>(targets), row_max, partials, v, valid, vocab_start);
    MT_CHECK_LAUNCH();
    return {};
  });
}

LaunchResult LaunchShardedLoss(IdType id_type, const void* targets, const float* row_max,
                               const float* partials, float* losses, int64_t n, void* stream) {
  if (n == 0) return {};
  return internal::DispatchId(id_type, [&](auto tag) -> LaunchResult {
    using I = typename decltype(tag)::type;
    MT_LAUNCH(GridFor(n), kThreads, 0, static_cast<cudaStream_t>(stream), ShardedLossKernel<I>)
    (static_cast<const I*>(targets), row_max, partials, losses, n);
    MT_CHECK_LAUNCH();
    return {};
  });
}

LaunchResult LaunchShardedCrossEntropyBackward(IdType id_type, const float* logits,
                                               const void* targets, const float* row_max,
                                               const float* partials, const float* dlosses,
                                               float* dlogits, int64_t n, int64_t v, int64_t valid,
                                               int64_t vocab_start, void* stream) {
  if (n == 0) return {};
  return internal::DispatchId(id_type, [&](auto tag) -> LaunchResult {
    using I = typename decltype(tag)::type;
    MT_LAUNCH(Rows(n), kThreads, 0, static_cast<cudaStream_t>(stream), ShardedBackwardKernel<I>)
    (logits, static_cast<const I*>(targets), row_max, partials, dlosses, dlogits, v, valid,
     vocab_start);
    MT_CHECK_LAUNCH();
    return {};
  });
}

}  // namespace cuda
}  // namespace mt
