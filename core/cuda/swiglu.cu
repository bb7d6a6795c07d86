// SwiGLU forward and backward: one thread per element in grid-stride loops, f32 math (expf) and
// one rounding of each output, as the CPU kernels in core/ops/swiglu.cc.
#include "core/cuda/kernel_util.cuh"

namespace mt {
namespace cuda {
namespace {

__device__ __forceinline__ float Sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

template <typename T>
__global__ void SwiGluKernel(const T* gate, const T* up, T* y, int64_t n) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    const float g = Load(gate + i);
    Store(y + i, g * Sigmoid(g) * Load(up + i));
  }
}

template <typename T>
__global__ void SwiGluBackwardKernel(const T* gate, const T* up, const T* dy, T* dgate, T* dup,
                                     int64_t n) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    // All inputs are read before the outputs (which may alias them) are written.
    const float g = Load(gate + i), u = Load(up + i), d = Load(dy + i);
    const float s = Sigmoid(g);
    Store(dgate + i, d * u * (s * (1.0f + g * (1.0f - s))));
    Store(dup + i, d * (g * s));
  }
}

}  // namespace

LaunchResult LaunchSwiGlu(ElemType type, const void* gate, const void* up, void* y, int64_t n,
                          void* stream) {
  if (n == 0) return {};
  auto s = static_cast<cudaStream_t>(stream);
  return internal::DispatchElem(type, [&](auto tag) -> LaunchResult {
    using T = typename decltype(tag)::type;
    MT_LAUNCH(GridFor(n), kThreads, 0, s, SwiGluKernel<T>)
    (static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<T*>(y), n);
    MT_CHECK_LAUNCH();
    return {};
  });
}

LaunchResult LaunchSwiGluBackward(ElemType type, const void* gate, const void* up, const void* dy,
                                  void* dgate, void* dup, int64_t n, void* stream) {
  if (n == 0) return {};
  auto s = static_cast<cudaStream_t>(stream);
  return internal::DispatchElem(type, [&](auto tag) -> LaunchResult {
    using T = typename decltype(tag)::type;
    MT_LAUNCH(GridFor(n), kThreads, 0, s, SwiGluBackwardKernel<T>)
    (static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<const T*>(dy),
     static_cast<T*>(dgate), static_cast<T*>(dup), n);
    MT_CHECK_LAUNCH();
    return {};
  });
}

}  // namespace cuda
}  // namespace mt
