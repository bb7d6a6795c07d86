// LayerNorm over the last dimension: y = (x - mean) * rstd * gamma + beta,
// rstd = 1 / sqrt(var + eps), var the biased (population) variance.
//
// x, y, dy, dx: [..., C] in f32/bf16/f16 (same dtype); gamma, beta, dgamma, dbeta: [C] in f32 or
// x's dtype; mean, rstd: [R] f32 with R = numel / C (saved by the forward for the backward).
// Statistics and gradients are accumulated in f32. dgamma and dbeta are OVERWRITTEN.
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

absl::Status LayerNormBackward(const ExecContext& ctx, const TensorView& x,
                               const TensorView& gamma, const TensorView& mean,
                               const TensorView& rstd, const TensorView& dy, const TensorView& dx,
                               const TensorView& dgamma, const TensorView& dbeta);

}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_LAYERNORM_H_
