// Dtype and device dispatch for the ops (internal to core/ops): the one place that maps a float
// DType to its C++ element type, and the one place that routes an op to its CUDA implementation
// (core/cuda/ops_cuda.h). Every build has the same code here: without the CUDA backend the
// mt::cuda functions are link-time stubs (core/cuda/ops_cuda_stub.cc) answering Unimplemented.
#ifndef MT_CORE_OPS_DISPATCH_H_
#define MT_CORE_OPS_DISPATCH_H_

#include "core/cuda/ops_cuda.h"
#include "core/dtype.h"
#include "core/ops/check.h"
#include "core/ops/convert_simd.h"
#include "glog/logging.h"

// Inside an op, after its argument checks: returns `cuda_call` (a call into mt::cuda, or a
// helper of the op's file that makes such calls) when `tensor` is on a CUDA device, and
// Unimplemented (UnsupportedDevice) for any other device that is not the CPU; on the CPU it falls
// through to the op's CPU code. `cuda_call` is evaluated only for a CUDA tensor. This is the ops'
// only form of device routing, used as well where an op checks ids or targets on the device
// before its kernel runs.
#define MT_ROUTE_DEVICE(op, tensor, cuda_call)                                               \
  do {                                                                                       \
    if ((tensor).device.is_cuda()) return (cuda_call);                                       \
    if (!(tensor).device.is_cpu()) return ::mt::ops::UnsupportedDevice(op, (tensor).device); \
  } while (0)

namespace mt {
namespace ops {
namespace internal {

// Calls fn(T{}) with T the C++ type of a float dtype (float, bf16, f16). Callers validate the
// dtype first (CheckDType); anything else is a programmer error.
template <typename Fn>
void DispatchFloat(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32:
      fn(float{});
      return;
    case DType::kBF16:
      fn(bf16{});
      return;
    case DType::kF16:
      fn(f16{});
      return;
    default:
      LOG(FATAL) << "not a float dtype: " << DTypeName(dtype);
  }
}

// dst[i] = src[i] as f32 for i < n: the CPU kernels' f32 working copies of bf16 and f16 data
// (SIMD for bf16 and f16: convert_simd.h, the same bits as ToFloat).
template <typename T>
void ToF32(const T* src, int64_t n, float* dst) {
  if constexpr (std::is_same_v<T, bf16>) {
    Bf16ToF32Range(src, n, dst);
  } else if constexpr (std::is_same_v<T, f16>) {
    F16ToF32Range(src, n, dst);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = ToFloat(src[i]);
  }
}

// dst[i] = src[i] rounded to T for i < n (SIMD for bf16, the same bits as FromFloat).
template <typename T>
void FromF32(const float* src, int64_t n, T* dst) {
  if constexpr (std::is_same_v<T, bf16>) {
    F32ToBf16Range(src, n, dst);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = FromFloat<T>(src[i]);
  }
}

}  // namespace internal
}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_DISPATCH_H_
