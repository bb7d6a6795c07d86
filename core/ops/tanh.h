// Hyperbolic tangent and its backward (BERT's pooler: dense + tanh on the [CLS] position).
//
// x, y, dy, dx: one shape (any rank), one float dtype (f32, bf16, f16), contiguous, on one device;
// math in f32, one rounding to the dtype. y may alias x; dx may alias dy or y.
// Errors: InvalidArgument for mismatched shapes, dtypes or devices and non-contiguous views (the
// message names the op and the tensor); Unimplemented for other dtypes and for devices without a
// kernel (CPU; CUDA in CUDA builds). CPU kernels split the work over ctx.pool; results do not
// depend on the number of threads (bitwise).
#ifndef MT_CORE_OPS_TANH_H_
#define MT_CORE_OPS_TANH_H_

#include "absl/status/status.h"
#include "core/exec_context.h"
#include "core/tensor.h"

namespace mt {
namespace ops {

// y = tanh(x).
absl::Status Tanh(const ExecContext& ctx, const TensorView& x, const TensorView& y);

// dx = dy * (1 - y^2), from the forward's OUTPUT y = tanh(x) (so x need not be kept); overwrites
// dx.
absl::Status TanhBackward(const ExecContext& ctx, const TensorView& y, const TensorView& dy,
                          const TensorView& dx);

}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_TANH_H_
