// One row of ops::LayerNorm and ops::LayerNormBackward (layernorm.cc) on f32 values in SIMD with
// runtime dispatch (core/simd.h). Internal to core/ops.
//
// Sums over a row run in eight f32 lanes (element c into lane c mod 8, in order) combined as
// ((l0 + l4) + (l1 + l5)) + ((l2 + l6) + (l3 + l7)); every lane operation rounds once (no fused
// multiply-add). So a row's results depend on its values alone, and are the same bits at every
// SIMD target.
#ifndef MT_CORE_OPS_LAYERNORM_SIMD_H_
#define MT_CORE_OPS_LAYERNORM_SIMD_H_

#include <cstdint>

namespace mt {
namespace ops {
namespace internal {

// y[c] = ((x[c] - mean) rstd) gamma[c] + beta[c] for c < C (C >= 1), with mean = sum(x) / C and
// rstd = 1 / sqrt(sum((x - mean)^2) / C + eps) (two passes: no cancellation), stored in *mean
// and *rstd. y may be x.
void LayerNormRow(const float* x, const float* gamma, const float* beta, float eps, int64_t C,
                  float* y, float* mean, float* rstd);

// The backward of LayerNormRow for one row given its mean and rstd: with xhat = (x - mean) rstd
// and g = dy gamma, dx = rstd ((g - mean(g)) - xhat mean(g xhat)); adds dy xhat to dgamma[c] and
// dy to dbeta[c]. dx may be x or dy.
void LayerNormGradRow(const float* x, const float* dy, const float* gamma, float mean, float rstd,
                      int64_t C, float* dx, float* dgamma, float* dbeta);

}  // namespace internal
}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_LAYERNORM_SIMD_H_
