// Dtype dispatch for CPU kernels: the one place that maps a float DType to its C++ element type.
// Internal to core/ops.
#ifndef MT_CORE_OPS_DISPATCH_H_
#define MT_CORE_OPS_DISPATCH_H_

#include "core/dtype.h"
#include "glog/logging.h"

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

}  // namespace internal
}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_DISPATCH_H_
