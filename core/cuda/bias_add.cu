// Bias add: one thread per element, grid-stride loop. Math in f32.
#include "core/cuda/kernel_util.cuh"

namespace mt {
namespace cuda {
namespace {

template <typename T>
__global__ void BiasAddKernel(const T* x, const T* bias, T* y, int64_t n, int64_t cols) {
  for (int64_t i = GlobalThread(); i < n; i += GridStride()) {
    Store(y + i, Load(x + i) + Load(bias + i % cols));
  }
}

}  // namespace

LaunchResult LaunchBiasAdd(ElemType type, const void* x, const void* bias, void* y, int64_t rows,
                           int64_t cols, void* stream) {
  const int64_t n = rows * cols;
  if (n == 0) return {};
  return internal::DispatchElem(type, [&](auto tag) -> LaunchResult {
    using T = typename decltype(tag)::type;
    MT_LAUNCH(internal::GridFor(n), internal::kThreads, 0, static_cast<cudaStream_t>(stream),
              BiasAddKernel<T>)
    (static_cast<const T*>(x), static_cast<const T*>(bias), static_cast<T*>(y), n, cols);
    MT_CHECK_LAUNCH();
    return {};
  });
}

}  // namespace cuda
}  // namespace mt
