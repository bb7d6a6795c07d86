// Highway compiles this file once per SIMD target (hwy/foreach_target.h re-includes it).
#include "core/ops/elementwise_simd.h"

#include <cstdint>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/ops/elementwise_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace mt::ops::internal::HWY_NAMESPACE {
namespace hn = ::hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// out[i] = vec(i) over whole vectors, then scalar(i) for the last n mod Lanes elements (the same
// correctly rounded operation on one lane).
template <typename VecOp, typename ScalarOp>
HWY_INLINE void ForEach(float* out, int64_t n, const VecOp& vec, const ScalarOp& scalar) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  // Two vectors per step: independent loads and stores in flight.
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    const VF v0 = vec(i), v1 = vec(i + lanes);
    hn::StoreU(v0, d, out + i);
    hn::StoreU(v1, d, out + i + lanes);
  }
  for (; i + lanes <= n; i += lanes) hn::StoreU(vec(i), d, out + i);
  for (; i < n; ++i) out[i] = scalar(i);
}

void AddRange(const float* a, const float* b, float* out, int64_t n) {
  const DF d;
  ForEach(
      out, n, [&](int64_t i) { return hn::Add(hn::LoadU(d, a + i), hn::LoadU(d, b + i)); },
      [&](int64_t i) { return a[i] + b[i]; });
}

void ScaleRange(const float* x, float alpha, float* y, int64_t n) {
  const DF d;
  const VF va = hn::Set(d, alpha);
  ForEach(
      y, n, [&](int64_t i) { return hn::Mul(va, hn::LoadU(d, x + i)); },
      [&](int64_t i) { return alpha * x[i]; });
}

void DropoutRange(const float* x, const float* factor, float* y, int64_t n) {
  const DF d;
  ForEach(
      y, n,
      [&](int64_t i) {
        const VF f = hn::LoadU(d, factor + i);
        return hn::IfThenElseZero(hn::Ne(f, hn::Zero(d)), hn::Mul(hn::LoadU(d, x + i), f));
      },
      [&](int64_t i) { return factor[i] != 0.0f ? x[i] * factor[i] : 0.0f; });
}

}  // namespace mt::ops::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mt::ops::internal {

HWY_EXPORT(AddRange);
HWY_EXPORT(ScaleRange);
HWY_EXPORT(DropoutRange);

void AddRange(const float* a, const float* b, float* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(AddRange)(a, b, out, n);
}

void ScaleRange(const float* x, float alpha, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(ScaleRange)(x, alpha, y, n);
}

void DropoutRange(const float* x, const float* factor, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(DropoutRange)(x, factor, y, n);
}

}  // namespace mt::ops::internal
#endif  // HWY_ONCE
