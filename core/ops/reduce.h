// Whole-tensor reductions returning a host double: float tensors (f32/bf16/f16) of any shape,
// contiguous.
//
// Accumulation is in f64 over fixed chunks of consecutive elements (the chunk size is a constant,
// not a function of the pool), and the chunk results are combined serially in chunk order, so the
// result is bitwise identical for every thread count. Squares of f32/bf16/f16 values are exact in
// f64, so SumOfSquares only rounds in its additions.
// NaN: any NaN element makes every reduction NaN (Max included, unlike std::max). Infinities
// follow IEEE arithmetic (a sum holding +inf and -inf is NaN).
// Max of an empty tensor is -inf; sums of an empty tensor are 0.
// Errors: InvalidArgument for a non-contiguous view; Unimplemented for other dtypes. CUDA tensors
// (f64 accumulation in a fixed tree, so also deterministic) need ctx.cuda, and the call waits for
// the stream to read the result back.
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
