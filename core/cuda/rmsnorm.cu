// RMSNorm forward and backward: one block per row (the sum of squares and the row dot product
// reduced over the block in f32), and dgamma through the deterministic column sum
// (column_sum.cuh).
#include "core/cuda/column_sum.cuh"

namespace mt {
namespace cuda {
namespace {

// Threads per row: a warp for short rows, up to 256 for long ones (a multiple of 32).
inline int RowThreads(int64_t cols) {
  const int64_t warps = (cols + 4 * kWarp - 1) / (4 * kWarp);  // About four elements a thread.
  return static_cast<int>(kWarp * (warps < 1 ? 1 : (warps > 8 ? 8 : warps)));
}

// Blocks for `rows` rows; a block loops over rows past the grid.
inline unsigned RowGrid(int64_t rows) {
  constexpr int64_t kMaxBlocks = int64_t{1} << 20;
  return static_cast<unsigned>(rows < kMaxBlocks ? rows : kMaxBlocks);
}

template <typename T, typename P>
__global__ void RmsNormKernel(const T* x, const P* gamma, float eps, T* y, float* rstd,
                              int64_t rows, int64_t cols) {
  __shared__ float partial[kWarp];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    float sq = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float v = Load(xr + c);
      sq += v * v;
    }
    const float mean_sq = BlockReduce(sq, SumOp(), 0.0f, partial) / static_cast<float>(cols);
    const float rs = 1.0f / sqrtf(mean_sq + eps);
    if (threadIdx.x == 0) rstd[r] = rs;
    // Each thread rereads only the elements it writes, so y may alias x.
    T* yr = y + r * cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      Store(yr + c, Load(xr + c) * rs * Load(gamma + c));
    }
  }
}

// dx = rstd * (g - xhat * mean(g * xhat)), g = dy * gamma, xhat = x * rstd.
template <typename T, typename P>
__global__ void RmsNormDxKernel(const T* x, const P* gamma, const float* rstd, const T* dy, T* dx,
                                int64_t rows, int64_t cols) {
  __shared__ float partial[kWarp];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    const T* dyr = dy + r * cols;
    const float rs = rstd[r];
    float dot = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      dot += (Load(dyr + c) * Load(gamma + c)) * (Load(xr + c) * rs);
    }
    const float m = BlockReduce(dot, SumOp(), 0.0f, partial) / static_cast<float>(cols);
    T* dxr = dx + r * cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float g = Load(dyr + c) * Load(gamma + c);
      const float xhat = Load(xr + c) * rs;
      Store(dxr + c, rs * (g - xhat * m));
    }
  }
}

// The dgamma term of (r, c): dy * xhat.
template <typename T>
struct DgammaTerm {
  const T* x;
  const T* dy;
  const float* rstd;
  int64_t cols;
  __device__ __forceinline__ void operator()(int64_t r, int64_t c, float* acc) const {
    acc[0] += Load(dy + r * cols + c) * (Load(x + r * cols + c) * rstd[r]);
  }
};

// fn(Tag<T>, Tag<P>) for the element type and the parameter type (f32 or the element type).
template <typename Fn>
LaunchResult DispatchRmsNorm(ElemType type, ElemType param, Fn&& fn) {
  return internal::DispatchElem(type, [&](auto tag) -> LaunchResult {
    using T = typename decltype(tag)::type;
    if (param == ElemType::kF32) return fn(tag, internal::Tag<float>{});
    return fn(tag, internal::Tag<T>{});
  });
}

}  // namespace

LaunchResult LaunchRmsNorm(ElemType type, ElemType param, const void* x, const void* gamma,
                           float eps, void* y, float* rstd, int64_t rows, int64_t cols,
                           void* stream) {
  if (rows == 0 || cols == 0) return {};
  auto s = static_cast<cudaStream_t>(stream);
  return DispatchRmsNorm(type, param, [&](auto tag, auto ptag) -> LaunchResult {
    using T = typename decltype(tag)::type;
    using P = typename decltype(ptag)::type;
    MT_LAUNCH(RowGrid(rows), RowThreads(cols), 0, s, RmsNormKernel<T, P>)
    (static_cast<const T*>(x), static_cast<const P*>(gamma), eps, static_cast<T*>(y), rstd, rows,
     cols);
    MT_CHECK_LAUNCH();
    return {};
  });
}

int64_t RmsNormBackwardScratchFloats(int64_t rows, int64_t cols) {
  return internal::ColumnSumScratchFloats(1, rows, cols);
}

LaunchResult LaunchRmsNormBackward(ElemType type, ElemType param, const void* x, const void* gamma,
                                   const float* rstd, const void* dy, void* dx, void* dgamma,
                                   int64_t rows, int64_t cols, float* scratch, void* stream) {
  if (cols == 0) return {};
  auto s = static_cast<cudaStream_t>(stream);
  return DispatchRmsNorm(type, param, [&](auto tag, auto ptag) -> LaunchResult {
    using T = typename decltype(tag)::type;
    using P = typename decltype(ptag)::type;
    const T* px = static_cast<const T*>(x);
    const T* pdy = static_cast<const T*>(dy);
    // dgamma first: dx may alias x or dy, which it reads.
    const DgammaTerm<T> term{px, pdy, rstd, cols};
    MT_RETURN_IF_LAUNCH_FAILED((internal::LaunchColumnSum<1, P>(
        term, rows, cols, scratch, static_cast<P*>(dgamma), static_cast<P*>(nullptr), s)));
    if (rows == 0) return {};
    MT_LAUNCH(RowGrid(rows), RowThreads(cols), 0, s, RmsNormDxKernel<T, P>)
    (px, static_cast<const P*>(gamma), rstd, pdy, static_cast<T*>(dx), rows, cols);
    MT_CHECK_LAUNCH();
    return {};
  });
}

}  // namespace cuda
}  // namespace mt
