// Highway compiles this file once per SIMD target (hwy/foreach_target.h re-includes it).
#include "core/ops/reduce_simd.h"

#include <cstdint>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/ops/reduce_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace mt::ops::internal::HWY_NAMESPACE {
namespace hn = ::hwy::HWY_NAMESPACE;

// The eight f64 accumulators in 8 / Lanes vectors (two to eight lanes each), and the f32 lanes
// that widen into one of them.
using DD = hn::CappedTag<double, 8>;
using DF = hn::Rebind<float, DD>;

template <bool kSquares>
double SumTerms(const float* x, int64_t n) {
  const DD dd;
  const DF df;
  constexpr size_t kN = hn::MaxLanes(DD());
  constexpr size_t kVecs = 8 / kN;
  static_assert(kVecs * kN == 8, "eight lanes in whole vectors");
  hn::Vec<DD> acc[kVecs];
  for (size_t v = 0; v < kVecs; ++v) acc[v] = hn::Zero(dd);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (size_t v = 0; v < kVecs; ++v) {
      const auto t = hn::PromoteTo(dd, hn::LoadU(df, x + i + v * kN));
      acc[v] = kSquares ? hn::MulAdd(t, t, acc[v]) : hn::Add(acc[v], t);  // t * t is exact.
    }
  }
  HWY_ALIGN double lanes[8];
  for (size_t v = 0; v < kVecs; ++v) hn::Store(acc[v], dd, lanes + v * kN);
  for (int k = 0; i < n; ++i, ++k) {
    const double t = x[i];
    lanes[k] += kSquares ? t * t : t;
  }
  for (int width = 4; width > 0; width /= 2) {
    for (int k = 0; k < width; ++k) lanes[k] += lanes[k + width];
  }
  return lanes[0];
}

double SumF32(const float* x, int64_t n) { return SumTerms<false>(x, n); }
double SumOfSquaresF32(const float* x, int64_t n) { return SumTerms<true>(x, n); }

}  // namespace mt::ops::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mt::ops::internal {

HWY_EXPORT(SumF32);
HWY_EXPORT(SumOfSquaresF32);

double SumF32(const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(SumF32)(x, n); }

double SumOfSquaresF32(const float* x, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(SumOfSquaresF32)(x, n);
}

}  // namespace mt::ops::internal
#endif  // HWY_ONCE
