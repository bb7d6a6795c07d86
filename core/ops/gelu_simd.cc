// Highway compiles this file once per SIMD target (hwy/foreach_target.h re-includes it).
#include "core/ops/gelu_simd.h"

#include <array>
#include <cstdint>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/ops/gelu_simd.cc"
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

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

// u = sqrt(2/pi) (x + c x^3) and tanh(u).
inline VF TanhOfU(DF d, VF x) {
  const VF cube = hn::Mul(hn::Mul(hn::Mul(hn::Set(d, kGeluCubic), x), x), x);
  return hn::Tanh(d, hn::Mul(hn::Set(d, kSqrt2OverPi), hn::Add(x, cube)));
}

inline VF Gelu(DF d, VF x) {
  return hn::Mul(hn::Mul(hn::Set(d, 0.5f), x), hn::Add(hn::Set(d, 1.0f), TanhOfU(d, x)));
}

inline VF GeluGrad(DF d, VF x, VF dy) {
  const VF one = hn::Set(d, 1.0f), half = hn::Set(d, 0.5f);
  const VF t = TanhOfU(d, x);
  const VF du = hn::Mul(hn::Set(d, kSqrt2OverPi),
                        hn::Add(one, hn::Mul(hn::Mul(hn::Set(d, 3.0f * kGeluCubic), x), x)));
  const VF outer = hn::Mul(half, hn::Add(one, t));
  const VF inner = hn::Mul(hn::Mul(hn::Mul(half, x), hn::Sub(one, hn::Mul(t, t))), du);
  return hn::Mul(dy, hn::Add(outer, inner));
}

void GeluTanhRange(const float* x, float* y, int64_t n) {
  MapVectors<1, 1>(n, {x}, {y}, [](DF d, const VF* v) { return std::array<VF, 1>{Gelu(d, v[0])}; });
}

void GeluTanhGradRange(const float* x, const float* dy, float* dx, int64_t n) {
  MapVectors<2, 1>(n, {x, dy}, {dx},
                   [](DF d, const VF* v) { return std::array<VF, 1>{GeluGrad(d, v[0], v[1])}; });
}

}  // namespace mt::ops::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mt::ops::internal {

HWY_EXPORT(GeluTanhRange);
HWY_EXPORT(GeluTanhGradRange);

void GeluTanhRange(const float* x, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(GeluTanhRange)(x, y, n);
}

void GeluTanhGradRange(const float* x, const float* dy, float* dx, int64_t n) {
  HWY_DYNAMIC_DISPATCH(GeluTanhGradRange)(x, dy, dx, n);
}

}  // namespace mt::ops::internal
#endif  // HWY_ONCE
