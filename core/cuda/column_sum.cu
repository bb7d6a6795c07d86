// BiasGrad: dbias[c] = sum_r dy[r, c] through the deterministic column sum (column_sum.cuh).
#include "core/cuda/column_sum.cuh"

namespace mt {
namespace cuda {
namespace {

template <typename T>
struct BiasGradTerm {
  const T* dy;
  int64_t cols;
  __device__ __forceinline__ void operator()(int64_t r, int64_t c, float* acc) const {
    acc[0] += internal::Load(dy + r * cols + c);
  }
};

}  // namespace

int64_t BiasGradScratchFloats(int64_t rows, int64_t cols) {
  return internal::ColumnSumScratchFloats(1, rows, cols);
}

LaunchResult LaunchBiasGrad(ElemType type, ElemType out_type, const void* dy, void* dbias,
                            int64_t rows, int64_t cols, float* scratch, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  return internal::DispatchElem(type, [&](auto tag) -> LaunchResult {
    using T = typename decltype(tag)::type;
    const BiasGradTerm<T> term{static_cast<const T*>(dy), cols};
    if (out_type == ElemType::kF32) {
      return internal::LaunchColumnSum<1, float>(term, rows, cols, scratch,
                                                 static_cast<float*>(dbias), nullptr, s);
    }
    return internal::LaunchColumnSum<1, T>(term, rows, cols, scratch, static_cast<T*>(dbias),
                                           static_cast<T*>(nullptr), s);
  });
}

}  // namespace cuda
}  // namespace mt
