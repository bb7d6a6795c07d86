// Element-wise f32 loops over whole SIMD vectors, for the Highway kernels of core/ops (included
// once per target by each *_simd.cc, after hwy/highway.h): the last elements of a range that do
// not fill a vector go through the same vector code, from a zero-padded copy, so that an
// element's result depends on its value alone and not on where it falls in the range.

// Per-target include guard (Highway's convention for -inl.h headers).
#if defined(MT_CORE_OPS_VECTOR_RANGE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MT_CORE_OPS_VECTOR_RANGE_INL_H_
#undef MT_CORE_OPS_VECTOR_RANGE_INL_H_
#else
#define MT_CORE_OPS_VECTOR_RANGE_INL_H_
#endif

#include <algorithm>
#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace mt::ops::internal::HWY_NAMESPACE {
namespace hn = ::hwy::HWY_NAMESPACE;

// For i < n in steps of one f32 vector: the vectors at i of the kIn inputs go to f(d, v) (v: an
// array of kIn vectors), which returns a std::array of kOut vectors, stored at i of the outputs.
// Each step loads all its inputs before storing, so outputs may alias inputs.
template <size_t kIn, size_t kOut, typename F>
HWY_INLINE void MapVectors(int64_t n, const float* const (&in)[kIn], float* const (&out)[kOut],
                           const F& f) {
  using D = hn::ScalableTag<float>;
  using V = hn::Vec<D>;
  const D d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    V v[kIn];
    for (size_t k = 0; k < kIn; ++k) v[k] = hn::LoadU(d, in[k] + i);
    const auto r = f(d, static_cast<const V*>(v));
    for (size_t k = 0; k < kOut; ++k) hn::StoreU(r[k], d, out[k] + i);
  }
  if (i == n) return;
  const int64_t count = n - i;
  HWY_ALIGN float buf[kIn > kOut ? kIn : kOut][HWY_MAX_BYTES / sizeof(float)] = {};
  V v[kIn];
  for (size_t k = 0; k < kIn; ++k) {
    std::copy(in[k] + i, in[k] + n, buf[k]);
    v[k] = hn::Load(d, buf[k]);
  }
  const auto r = f(d, static_cast<const V*>(v));
  for (size_t k = 0; k < kOut; ++k) {
    hn::Store(r[k], d, buf[k]);
    std::copy(buf[k], buf[k] + count, out[k] + i);
  }
}

}  // namespace mt::ops::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // MT_CORE_OPS_VECTOR_RANGE_INL_H_
