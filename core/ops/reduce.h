// Whole-tensor reductions returning a host double: float tensors (f32/bf16/f16), contiguous.
// Accumulation is in f64 (so the result does not depend on the thread count beyond f64 rounding).
// Max of an empty tensor is -inf; sums of an empty tensor are 0.
#ifndef MT_CORE_OPS_REDUCE_H_
#define MT_CORE_OPS_REDUCE_H_

#include "absl/status/statusor.h"
#include "core/exec_context.h"
#include "core/tensor.h"

namespace mt {
namespace ops {

absl::StatusOr<double> Sum(const ExecContext& ctx, const TensorView& x);
absl::StatusOr<double> Max(const ExecContext& ctx, const TensorView& x);
// sum of x^2 (for global gradient norms across shards) and its square root.
absl::StatusOr<double> SumOfSquares(const ExecContext& ctx, const TensorView& x);
absl::StatusOr<double> L2Norm(const ExecContext& ctx, const TensorView& x);

}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_REDUCE_H_
