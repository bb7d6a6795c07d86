// LayerNorm forward and backward: one warp per row (statistics in f32, two passes as on the CPU),
// and the parameter gradients through the deterministic column sum (column_sum.cuh).
#include "core/cuda/column_sum.cuh"

namespace mt {
namespace cuda {
namespace {

constexpr int kWarpsPerBlock = 4;

// Row r of the block's warp, or -1 past the end.
__device__ __forceinline__ int64_t WarpRow(int64_t rows) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  return r < rows ? r : -1;
}

inline unsigned RowBlocks(int64_t rows) {
  return static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

template <typename T, typename P>
__global__ void LayerNormKernel(const T* x, const P* gamma, const P* beta, float eps, T* y,
                                float* mean, float* rstd, int64_t rows, int64_t cols) {
  const int64_t r = WarpRow(rows);
  if (r < 0) return;  // The whole warp leaves together.
  const int lane = threadIdx.x % kWarp;
  const T* xr = x + r * cols;
  float s = 0.0f;
  for (int64_t c = lane; c < cols; c += kWarp) s += Load(xr + c);
  const float mu = WarpReduce(s, SumOp()) / static_cast<float>(cols);
  float sq = 0.0f;
  for (int64_t c = lane; c < cols; c += kWarp) {
    const float d = Load(xr + c) - mu;
    sq += d * d;
  }
  const float var = WarpReduce(sq, SumOp()) / static_cast<float>(cols);
  const float rs = 1.0f / sqrtf(var + eps);
  if (lane == 0) {
    mean[r] = mu;
    rstd[r] = rs;
  }
  // Each lane rereads only the elements it writes, so y may alias x.
  T* yr = y + r * cols;
  for (int64_t c = lane; c < cols; c += kWarp) {
    Store(yr + c, (Load(xr + c) - mu) * rs * Load(gamma + c) + Load(beta + c));
  }
}

template <typename T, typename P>
__global__ void LayerNormDxKernel(const T* x, const P* gamma, const float* mean, const float* rstd,
                                  const T* dy, T* dx, int64_t rows, int64_t cols) {
  const int64_t r = WarpRow(rows);
  if (r < 0) return;
  const int lane = threadIdx.x % kWarp;
  const T* xr = x + r * cols;
  const T* dyr = dy + r * cols;
  const float mu = mean[r];
  const float rs = rstd[r];
  float sg = 0.0f, sgx = 0.0f;
  for (int64_t c = lane; c < cols; c += kWarp) {
    const float xhat = (Load(xr + c) - mu) * rs;
    const float g = Load(dyr + c) * Load(gamma + c);
    sg += g;
    sgx += g * xhat;
  }
  const float inv_c = 1.0f / static_cast<float>(cols);
  const float mean_g = WarpReduce(sg, SumOp()) * inv_c;
  const float mean_gx = WarpReduce(sgx, SumOp()) * inv_c;
  T* dxr = dx + r * cols;
  for (int64_t c = lane; c < cols; c += kWarp) {
    const float xhat = (Load(xr + c) - mu) * rs;
    const float g = Load(dyr + c) * Load(gamma + c);
    Store(dxr + c, rs * (g - mean_g - xhat * mean_gx));
  }
}

// dgamma and dbeta terms of row r: dy * xhat and dy.
template <typename T>
struct ParamGradTerms {
  const T* x;
  const T* dy;
  const float* mean;
  const float* rstd;
  int64_t cols;
  __device__ __forceinline__ void operator()(int64_t r, int64_t c, float* acc) const {
    const float d = Load(dy + r * cols + c);
    const float xhat = (Load(x + r * cols + c) - mean[r]) * rstd[r];
    acc[0] += d * xhat;
    acc[1] += d;
  }
};

template <typename T, typename Fn>
LaunchResult DispatchParam(ElemType param, Fn&& fn) {
  if (param == ElemType::kF32) return fn(internal::Tag<float>{});
  return fn(internal::Tag<T>{});
}

}  // namespace

LaunchResult LaunchLayerNorm(ElemType type, ElemType param, const void* x, const void* gamma,
                             const void* beta, float eps, void* y, float* mean, float* rstd,
                             int64_t rows, int64_t cols, void* stream) {
  if (rows == 0 || cols == 0) return {};
  auto s = static_cast<cudaStream_t>(stream);
  return internal::DispatchElem(type, [&](auto tag) -> LaunchResult {
    using T = typename decltype(tag)::type;
    return DispatchParam<T>(param, [&](auto ptag) -> LaunchResult {
      using P = typename decltype(ptag)::type;
      MT_LAUNCH(RowBlocks(rows), kWarpsPerBlock * kWarp, 0, s, LayerNormKernel<T, P>)
      (static_cast<const T*>(x), static_cast<const P*>(gamma), static_cast<const P*>(beta), eps,
       static_cast<T*>(y), mean, rstd, rows, cols);
      MT_CHECK_LAUNCH();
      return {};
    });
  });
}

int64_t LayerNormBackwardScratchFloats(int64_t rows, int64_t cols) {
  return internal::ColumnSumScratchFloats(2, rows, cols);
}

LaunchResult LaunchLayerNormBackward(ElemType type, ElemType param, const void* x,
                                     const void* gamma, const float* mean, const float* rstd,
                                     const void* dy, void* dx, void* dgamma, void* dbeta,
                                     int64_t rows, int64_t cols, float* scratch, void* stream) {
  if (cols == 0) return {};
  auto s = static_cast<cudaStream_t>(stream);
  return internal::DispatchElem(type, [&](auto tag) -> LaunchResult {
    using T = typename decltype(tag)::type;
    return DispatchParam<T>(param, [&](auto ptag) -> LaunchResult {
      using P = typename decltype(ptag)::type;
      const T* px = static_cast<const T*>(x);
      const T* pdy = static_cast<const T*>(dy);
      // The parameter gradients first: dx may alias x or dy, which they read.
      const ParamGradTerms<T> terms{px, pdy, mean, rstd, cols};
      MT_RETURN_IF_LAUNCH_FAILED((internal::LaunchColumnSum<2, P>(
          terms, rows, cols, scratch, static_cast<P*>(dgamma), static_cast<P*>(dbeta), s)));
      if (rows == 0) return {};
      MT_LAUNCH(RowBlocks(rows), kWarpsPerBlock * kWarp, 0, s, LayerNormDxKernel<T, P>)
      (px, static_cast<const P*>(gamma), mean, rstd, pdy, static_cast<T*>(dx), rows, cols);
      MT_CHECK_LAUNCH();
      return {};
    });
  });
}

}  // namespace cuda
}  // namespace mt
