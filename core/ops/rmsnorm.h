// RMSNorm over the last dimension (Zhang & Sennrich 2019; LLaMA-style decoders):
//   y = x * rstd * gamma,  rstd = 1 / sqrt(mean(x^2) + eps)
// (no centring, no bias). Conventions as for LayerNorm (layernorm.h):
//
// x, y, dy, dx: [..., C] (C >= 1) in f32/bf16/f16, all of one dtype; gamma, dgamma: [C], both f32
// (the f32 master weight next to a 16-bit x) or both in x's dtype; rstd: f32 with R = numel / C
// elements, shaped [R] or like x without its last dim (written by the forward, read by the
// backward). All contiguous, on one device (CPU, or CUDA: the CUDA backward needs ctx.cuda).
// y may alias x; dx may alias dy or x. eps must be finite and >= 0.
// The mean square, rstd and every gradient are computed in f32, with one rounding of y and dx to
// their dtype. The backward gives
//   dx = rstd * (g - xhat * mean(g * xhat)),  g = dy * gamma, xhat = x * rstd,
//   dgamma[c] = sum over rows of dy * xhat   (OVERWRITTEN, in gamma's dtype; the caller
//                                            accumulates it into its gradient),
// dgamma's row sums in a fixed order (a function of the shape only), so every result is bitwise
// independent of the thread count.
// Errors: InvalidArgument for mismatched shapes/dtypes/devices (including a gamma or rstd of a
// dtype other than those above), non-contiguous views or a bad eps; Unimplemented for an x of
// another dtype, or another device.
#ifndef MT_CORE_OPS_RMSNORM_H_
#define MT_CORE_OPS_RMSNORM_H_

#include "absl/status/status.h"
#include "core/exec_context.h"
#include "core/tensor.h"

namespace mt {
namespace ops {

absl::Status RmsNorm(const ExecContext& ctx, const TensorView& x, const TensorView& gamma,
                     float eps, const TensorView& y, const TensorView& rstd);

absl::Status RmsNormBackward(const ExecContext& ctx, const TensorView& x, const TensorView& gamma,
                             const TensorView& rstd, const TensorView& dy, const TensorView& dx,
                             const TensorView& dgamma);

}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_RMSNORM_H_
