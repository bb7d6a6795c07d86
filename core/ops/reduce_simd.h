// The f32 sums of ops::Sum, ops::SumOfSquares and ops::L2Norm (reduce.cc), and the row sums of
// the softmax and RMSNorm, in SIMD with runtime dispatch (core/simd.h). Internal to core/ops.
//
// Each sums its n terms in f64 in eight interleaved accumulators (term i into accumulator i mod 8,
// in order), then combines them pairwise (a[k] += a[k + 4], a[k] += a[k + 2], a[0] + a[1]): the
// bits of the scalar loop with that layout, at every SIMD target (widening f32 to f64 and the
// product of two widened values are exact; each addition rounds once).
#ifndef MT_CORE_OPS_REDUCE_SIMD_H_
#define MT_CORE_OPS_REDUCE_SIMD_H_

#include <cstdint>

namespace mt {
namespace ops {
namespace internal {

// sum_i x[i] over i < n.
double SumF32(const float* x, int64_t n);

// sum_i x[i]^2 over i < n.
double SumOfSquaresF32(const float* x, int64_t n);

// sum_i x[i] y[i] over i < n.
double DotF32(const float* x, const float* y, int64_t n);

}  // namespace internal
}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_REDUCE_SIMD_H_
