// Highway compiles this file once per SIMD target (hwy/foreach_target.h re-includes it).
#include "core/ops/reduce_simd.h"

#include <cstdint>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/ops/reduce_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// After highway.h, once per target.
#include "core/ops/eight_lanes-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mt::ops::internal::HWY_NAMESPACE {
namespace hn = ::hwy::HWY_NAMESPACE;

// sum_i x[i] (y == nullptr, kSquares false), sum_i x[i]^2 (kSquares) or sum_i x[i] y[i].
template <bool kSquares>
double SumTerms(const float* x, const float* y, int64_t n) {
  // The eight f64 accumulators, and the f32 lanes that widen into one of their vectors.
  using Acc = EightLanes<double>;
  const Acc::D dd;
  const hn::Rebind<float, Acc::D> df;
  Acc acc;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    acc.AddEight(i, [&](int64_t c) {
      const auto t = hn::PromoteTo(dd, hn::LoadU(df, x + c));
      if (kSquares) return hn::Mul(t, t);  // The product of two widened f32 values is exact.
      return y == nullptr ? t : hn::Mul(t, hn::PromoteTo(dd, hn::LoadU(df, y + c)));
    });
  }
  double lanes[8];
  acc.Store(lanes);
  for (int k = 0; i < n; ++i, ++k) {
    const double t = x[i];
    lanes[k] += kSquares ? t * t : (y == nullptr ? t : t * static_cast<double>(y[i]));
  }
  for (int width = 4; width > 0; width /= 2) {
    for (int k = 0; k < width; ++k) lanes[k] += lanes[k + width];
  }
  return lanes[0];
}

double SumF32(const float* x, int64_t n) { return SumTerms<false>(x, nullptr, n); }
double SumOfSquaresF32(const float* x, int64_t n) { return SumTerms<true>(x, nullptr, n); }
double DotF32(const float* x, const float* y, int64_t n) { return SumTerms<false>(x, y, n); }

}  // namespace mt::ops::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mt::ops::internal {

HWY_EXPORT(SumF32);
HWY_EXPORT(SumOfSquaresF32);
HWY_EXPORT(DotF32);

double SumF32(const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(SumF32)(x, n); }

double SumOfSquaresF32(const float* x, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(SumOfSquaresF32)(x, n);
}

double DotF32(const float* x, const float* y, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(DotF32)(x, y, n);
}

}  // namespace mt::ops::internal
#endif  // HWY_ONCE
