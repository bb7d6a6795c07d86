// The f32 loops of the element-wise ops (elementwise.cc) in SIMD with runtime dispatch
// (core/simd.h). Internal to core/ops. Each output element is one correctly rounded operation
// (or a select) of its inputs: the same bits at every SIMD target and wherever it falls in a range.
// Outputs may alias inputs.
#ifndef MT_CORE_OPS_ELEMENTWISE_SIMD_H_
#define MT_CORE_OPS_ELEMENTWISE_SIMD_H_

#include <cstdint>

namespace mt {
namespace ops {
namespace internal {

// out[i] = a[i] + b[i] for i < n.
void AddRange(const float* a, const float* b, float* out, int64_t n);

// y[i] = alpha x[i] for i < n.
void ScaleRange(const float* x, float alpha, float* y, int64_t n);

// y[i] = factor[i] != 0 ? x[i] factor[i] : 0 for i < n: a dropout mask's factors (0 or
// 1 / (1 - p)) applied so that a dropped element is exactly 0 even where x[i] is inf or NaN.
void DropoutRange(const float* x, const float* factor, float* y, int64_t n);

}  // namespace internal
}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_ELEMENTWISE_SIMD_H_
