// SwiGLU on f32 ranges in SIMD with runtime dispatch (core/simd.h), for ops::SwiGlu and
// ops::SwiGluBackward (swiglu.cc). Internal to core/ops.
//
//   y = silu(g) u,  silu(g) = g s,  s = sigmoid(g) = 1 / (1 + exp(-g))
//   dg = dy u s (1 + g (1 - s)),  du = dy g s
//
// s is computed from e = exp(-|g|) <= 1 (Highway's exp, within 1 f32 ulp; glibc's expf does not
// vectorise) as 1 / (1 + e) for g >= 0 and e / (1 + e) below: nothing overflows, and both tails
// keep their relative accuracy down to g of about -87 (below, e is subnormal and loses it
// gradually, as expf's result does). Each element's result depends on its value alone, not on its
// position (the tail of a range runs through the same vector code), so a tensor split differently
// (threads, tensor-parallel shards) gets the same bits. Different SIMD targets may differ in the
// last bits (fused multiply-adds inside exp).
#ifndef MT_CORE_OPS_SWIGLU_SIMD_H_
#define MT_CORE_OPS_SWIGLU_SIMD_H_

#include <cstdint>

namespace mt {
namespace ops {
namespace internal {

// y[i] = silu(gate[i]) up[i] for i < n; y may be gate or up.
void SwiGluRange(const float* gate, const float* up, float* y, int64_t n);

// dgate[i] and dup[i] for i < n; each output may be any of the inputs (not each other).
void SwiGluGradRange(const float* gate, const float* up, const float* dy, float* dgate, float* dup,
                     int64_t n);

}  // namespace internal
}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_SWIGLU_SIMD_H_
