// The CPU AdamW/Adam update of a range of elements, in SIMD with runtime dispatch (core/simd.h).
// Internal to core/ops (adam.cc splits the elements over the pool and calls it per chunk).
#ifndef MT_CORE_OPS_ADAM_SIMD_H_
#define MT_CORE_OPS_ADAM_SIMD_H_

#include <cstdint>

#include "core/adam_constants.h"

namespace mt {
namespace ops {
namespace internal {

// Updates param, m, v [0, n) in place from grad, with exactly adam.h's f32 roundings in its order
// (lane-wise add, mul, div and sqrt, no FMA), so every target and the scalar tail give the bits
// of the scalar formula.
void AdamRange(const AdamConstants& c, float* param, const float* grad, float* m, float* v,
               int64_t n);

}  // namespace internal
}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_ADAM_SIMD_H_
