// Raw CUDA launchers, callable from host C++ without CUDA headers. Each returns the cudaError_t
// of the launch (0 = success) as an int; ops_cuda.cc turns it into a Status. Pointers are device
// pointers; `stream` is a cudaStream_t (null: default stream).
#ifndef MT_CORE_CUDA_LAUNCHERS_H_
#define MT_CORE_CUDA_LAUNCHERS_H_

#include <cstdint>

namespace mt {
namespace cuda {

enum class ElemType { kF32, kBF16, kF16 };

// y[r, c] = x[r, c] + bias[c] for r < rows, c < cols; y may alias x.
int LaunchBiasAdd(ElemType type, const void* x, const void* bias, void* y, int64_t rows,
                  int64_t cols, void* stream);

}  // namespace cuda
}  // namespace mt

#endif  // MT_CORE_CUDA_LAUNCHERS_H_
