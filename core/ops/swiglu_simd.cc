// Highway compiles this file once per SIMD target (hwy/foreach_target.h re-includes it).
#include "core/ops/swiglu_simd.h"

#include <array>
#include <cstdint>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/ops/swiglu_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// After highway.h, once per target.
#include "core/ops/vector_range-inl.h"
#include "hwy/contrib/math/math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mt::ops::internal::HWY_NAMESPACE {
namespace hn = ::hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// sigmoid(g) from e = exp(-|g|) (swiglu_simd.h).
inline VF Sigmoid(DF d, VF g) {
  const VF e = hn::Exp(d, hn::Neg(hn::Abs(g)));
  const VF one = hn::Set(d, 1.0f);
  const VF num = hn::IfThenElse(hn::Ge(g, hn::Zero(d)), one, e);
  return hn::Div(num, hn::Add(one, e));
}

void SwiGluRange(const float* gate, const float* up, float* y, int64_t n) {
  MapVectors<2, 1>(n, {gate, up}, {y}, [](DF d, const VF* v) {
    // (g s) u, rounded in this order.
    return std::array<VF, 1>{hn::Mul(hn::Mul(v[0], Sigmoid(d, v[0])), v[1])};
  });
}

void SwiGluGradRange(const float* gate, const float* up, const float* dy, float* dgate, float* dup,
                     int64_t n) {
  MapVectors<3, 2>(n, {gate, up, dy}, {dgate, dup}, [](DF d, const VF* v) {
    const VF g = v[0], u = v[1], dv = v[2];
    const VF one = hn::Set(d, 1.0f);
    const VF s = Sigmoid(d, g);
    // (dy u) (s (1 + g (1 - s))) and dy (g s), rounded in this order.
    return std::array<VF, 2>{
        hn::Mul(hn::Mul(dv, u), hn::Mul(s, hn::Add(one, hn::Mul(g, hn::Sub(one, s))))),
        hn::Mul(dv, hn::Mul(g, s))};
  });
}

}  // namespace mt::ops::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mt::ops::internal {

HWY_EXPORT(SwiGluRange);
HWY_EXPORT(SwiGluGradRange);

void SwiGluRange(const float* gate, const float* up, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(SwiGluRange)(gate, up, y, n);
}

void SwiGluGradRange(const float* gate, const float* up, const float* dy, float* dgate, float* dup,
                     int64_t n) {
  HWY_DYNAMIC_DISPATCH(SwiGluGradRange)(gate, up, dy, dgate, dup, n);
}

}  // namespace mt::ops::internal
#endif  // HWY_ONCE
