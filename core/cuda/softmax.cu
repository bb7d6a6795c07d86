// Scaled, masked softmax over the last dimension and its backward: one warp per row, math in f32,
// the row maximum subtracted before exp (as the CPU kernel in core/ops/softmax.cc).
#include <cmath>

#include "core/cuda/kernel_util.cuh"

namespace mt {
namespace cuda {
namespace {

constexpr int kWarpsPerBlock = 4;

template <typename T>
__global__ void SoftmaxKernel(const T* x, T* y, int64_t rows, int64_t tq, int64_t tk, float scale,
                              bool causal, const int32_t* mask, int64_t rows_per_b) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (r >= rows) return;  // The whole warp leaves together.
  const int lane = threadIdx.x % kWarp;
  const T* in = x + r * tk;
  T* out = y + r * tk;
  // Keys [0, kend) pass the causal mask (queries are the last tq of the tk positions); the
  // padding mask removes more.
  int64_t kend = tk;
  if (causal) {
    kend = r % tq + (tk - tq) + 1;
    kend = kend < 0 ? 0 : (kend > tk ? tk : kend);
  }
  const int32_t* m = mask == nullptr ? nullptr : mask + (r / rows_per_b) * tk;
  auto visible = [&](int64_t j) { return j < kend && (m == nullptr || m[j] != 0); };
  float mx = -INFINITY;
  for (int64_t j = lane; j < tk; j += kWarp) {
    if (visible(j)) mx = fmaxf(mx, scale * Load(in + j));
  }
  mx = WarpReduce(mx, MaxOp());
  if (mx == -INFINITY) {
    // Nothing to attend to (every key masked, or every score -inf).
    for (int64_t j = lane; j < tk; j += kWarp) Store(out + j, 0.0f);
    return;
  }
  float sum = 0.0f;
  for (int64_t j = lane; j < tk; j += kWarp) {
    if (visible(j)) sum += expf(scale * Load(in + j) - mx);
  }
  const float inv = 1.0f / WarpReduce(sum, SumOp());
  // Each lane rereads only the elements it writes, so y may alias x.
  for (int64_t j = lane; j < tk; j += kWarp) {
    Store(out + j, visible(j) ? expf(scale * Load(in + j) - mx) * inv : 0.0f);
  }
}

template <typename T>
__global__ void SoftmaxBackwardKernel(const T* y, const T* dy, T* dx, int64_t rows, int64_t tk,
                                      float scale) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (r >= rows) return;
  const int lane = threadIdx.x % kWarp;
  const T* yr = y + r * tk;
  const T* dyr = dy + r * tk;
  float dot = 0.0f;
  for (int64_t j = lane; j < tk; j += kWarp) dot += Load(yr + j) * Load(dyr + j);
  dot = WarpReduce(dot, SumOp());
  T* out = dx + r * tk;
  for (int64_t j = lane; j < tk; j += kWarp) {
    Store(out + j, scale * Load(yr + j) * (Load(dyr + j) - dot));
  }
}

inline unsigned Blocks(int64_t rows) {
  return static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

}  // namespace

LaunchResult LaunchSoftmax(ElemType type, const void* x, void* y, int64_t rows, int64_t tq,
                           int64_t tk, float scale, bool causal, const int32_t* padding_mask,
                           int64_t rows_per_b, void* stream) {
  if (rows == 0 || tk == 0) return {};
  return internal::DispatchElem(type, [&](auto tag) -> LaunchResult {
    using T = typename decltype(tag)::type;
    MT_LAUNCH(Blocks(rows), kWarpsPerBlock * kWarp, 0, static_cast<cudaStream_t>(stream),
              SoftmaxKernel<T>)
    (static_cast<const T*>(x), static_cast<T*>(y), rows, tq, tk, scale, causal, padding_mask,
     rows_per_b < 1 ? 1 : rows_per_b);
    MT_CHECK_LAUNCH();
    return {};
  });
}

LaunchResult LaunchSoftmaxBackward(ElemType type, const void* y, const void* dy, void* dx,
                                   int64_t rows, int64_t tk, float scale, void* stream) {
  if (rows == 0 || tk == 0) return {};
  return internal::DispatchElem(type, [&](auto tag) -> LaunchResult {
    using T = typename decltype(tag)::type;
    MT_LAUNCH(Blocks(rows), kWarpsPerBlock * kWarp, 0, static_cast<cudaStream_t>(stream),
              SoftmaxBackwardKernel<T>)
    (static_cast<const T*>(y), static_cast<const T*>(dy), static_cast<T*>(dx), rows, tk, scale);
    MT_CHECK_LAUNCH();
    return {};
  });
}

}  // namespace cuda
}  // namespace mt
