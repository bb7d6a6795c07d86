// LayerNorm over the last dimension: y = (x - mean) * rstd * gamma + beta,
// rstd = 1 / sqrt(var + eps), var the biased (population) variance.
//
// x, y, dy, dx: [..., C] (C >= 1) in f32/bf16/f16 (same dtype); gamma, beta, dgamma, dbeta: [C],
// all in f32 or all in x's dtype (mixed precision may keep the parameters in f32); mean, rstd: f32
// with R = numel / C elements, shaped [R] or like x without its last dim (saved by the forward for
// the backward). All contiguous, on one device (CPU, or CUDA: the CUDA backward needs ctx.cuda).
// y may alias x; dx may
// alias dy or x. eps must be finite and >= 0.
// Statistics and gradients are accumulated in f32 (two-pass mean and variance). dgamma and dbeta
// are OVERWRITTEN; their sums over rows use a fixed partition of the rows, so results are bitwise
// independent of the thread count.
// Errors: InvalidArgument for mismatched shapes/dtypes/devices (including parameters or
// statistics of a dtype other than those above), non-contiguous views or a bad eps;
// Unimplemented for an x of another dtype, or another device.
#ifndef MT_CORE_OPS_LAYERNORM_H_
#define MT_CORE_OPS_LAYERNORM_H_

#include "absl/status/status.h"
#include "core/exec_context.h"
#include "core/tensor.h"

namespace mt {
namespace ops {

absl::Status LayerNorm(const ExecContext& ctx, const TensorView& x, const TensorView& gamma,
                       const TensorView& beta, float eps, const TensorView& y,
                       const TensorView& mean, const TensorView& rstd);

absl::Status LayerNormBackward(const ExecContext& ctx, const TensorView& x, const TensorView& gamma,
                               const TensorView& mean, const TensorView& rstd, const TensorView& dy,
                               const TensorView& dx, const TensorView& dgamma,
                               const TensorView& dbeta);

}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_LAYERNORM_H_
