// Conversions between f32 and the 16-bit floats over ranges, in SIMD with runtime dispatch
// (core/simd.h): the CPU kernels' f32 working copies of bf16/f16 tensors and the GEMM's widened
// operands (through internal::ToF32 and FromF32 in dispatch.h). Bitwise the scalar conversions of
// core/dtype.h: widening is exact; narrowing to bf16 rounds to nearest even and turns a NaN into
// a quiet NaN with its sign and top payload bits (FloatToBf16). Internal to core/ops.
#ifndef MT_CORE_OPS_CONVERT_SIMD_H_
#define MT_CORE_OPS_CONVERT_SIMD_H_

#include <cstdint>

#include "core/dtype.h"

namespace mt {
namespace ops {
namespace internal {

// dst[i] = Bf16ToFloat(src[i]) for i < n.
void Bf16ToF32Range(const bf16* src, int64_t n, float* dst);
// dst[i] = FloatToBf16(src[i]) for i < n.
void F32ToBf16Range(const float* src, int64_t n, bf16* dst);
// dst[i] = HalfToFloat(src[i]) for i < n.
void F16ToF32Range(const f16* src, int64_t n, float* dst);

}  // namespace internal
}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_CONVERT_SIMD_H_
