// Highway compiles this file once per SIMD target (hwy/foreach_target.h re-includes it).
#include "core/ops/gelu_simd.h"

#include <algorithm>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/ops/gelu_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// After highway.h, once per target.
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

// Runs body(offset, count) over [0, n): whole vectors in place, then the last count < lanes
// elements through a zero-padded copy, so that every element takes the vector path.
template <typename Body>
void ForEachVector(DF d, int64_t n, const Body& body) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) body(i, lanes);
  if (i < n) body(i, n - i);
}

void GeluTanhRange(const float* x, float* y, int64_t n) {
  const DF d;
  HWY_ALIGN float in[HWY_MAX_BYTES / sizeof(float)] = {};
  ForEachVector(d, n, [&](int64_t i, int64_t count) {
    if (count == static_cast<int64_t>(hn::Lanes(d))) {
      hn::StoreU(Gelu(d, hn::LoadU(d, x + i)), d, y + i);
      return;
    }
    std::copy(x + i, x + i + count, in);
    hn::Store(Gelu(d, hn::Load(d, in)), d, in);
    std::copy(in, in + count, y + i);
  });
}

void GeluTanhGradRange(const float* x, const float* dy, float* dx, int64_t n) {
  const DF d;
  HWY_ALIGN float in_x[HWY_MAX_BYTES / sizeof(float)] = {};
  HWY_ALIGN float in_dy[HWY_MAX_BYTES / sizeof(float)] = {};
  ForEachVector(d, n, [&](int64_t i, int64_t count) {
    if (count == static_cast<int64_t>(hn::Lanes(d))) {
      hn::StoreU(GeluGrad(d, hn::LoadU(d, x + i), hn::LoadU(d, dy + i)), d, dx + i);
      return;
    }
    std::copy(x + i, x + i + count, in_x);
    std::copy(dy + i, dy + i + count, in_dy);
    hn::Store(GeluGrad(d, hn::Load(d, in_x), hn::Load(d, in_dy)), d, in_x);
    std::copy(in_x, in_x + count, dx + i);
  });
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
