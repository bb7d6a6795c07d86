// GeLU, the tanh approximation of GPT-2 and Megatron, on f32 ranges in SIMD with runtime dispatch
// (core/simd.h). Internal to core/ops: ops::Gelu, ops::GeluBackward and the GEMM epilogue all call
// these, so that a fused f32 epilogue is bitwise the unfused Gelu.
//
//   gelu(x)  = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 0.044715 x^2)
//
// tanh is Highway's (within 4 f32 ulps; glibc's tanhf does not vectorise). Each element's result
// depends on its value alone, not on its position (the tail of a range runs through the same
// vector code), so a tensor split differently (threads, tensor-parallel shards) gets the same
// bits. Different SIMD targets may differ in the last bits (FMA inside tanh).
#ifndef MT_CORE_OPS_GELU_SIMD_H_
#define MT_CORE_OPS_GELU_SIMD_H_

#include <cstdint>

namespace mt {
namespace ops {
namespace internal {

// y[i] = gelu(x[i]) for i in [0, n); y may be x.
void GeluTanhRange(const float* x, float* y, int64_t n);

// dx[i] = dy[i] * gelu'(x[i]) for i in [0, n); dx may be x or dy.
void GeluTanhGradRange(const float* x, const float* dy, float* dx, int64_t n);

}  // namespace internal
}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_GELU_SIMD_H_
