// Eight interleaved accumulators in SIMD vectors, for the Highway kernels of core/ops (included
// once per target by each *_simd.cc, after hwy/highway.h): the sums whose bits must not depend on
// the SIMD target keep term i of a run in accumulator i mod 8 at every vector width.

// Per-target include guard (Highway's convention for -inl.h headers).
#if defined(MT_CORE_OPS_EIGHT_LANES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MT_CORE_OPS_EIGHT_LANES_INL_H_
#undef MT_CORE_OPS_EIGHT_LANES_INL_H_
#else
#define MT_CORE_OPS_EIGHT_LANES_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace mt::ops::internal::HWY_NAMESPACE {
namespace hn = ::hwy::HWY_NAMESPACE;

// Eight accumulators of T (float or double) in kVecs vectors of kN lanes (kN * kVecs = 8: one
// vector of eight, two of four, or four of two).
template <typename T>
struct EightLanes {
  using D = hn::CappedTag<T, 8>;
  static constexpr size_t kN = hn::MaxLanes(D());
  static constexpr size_t kVecs = 8 / kN;
  static_assert(kVecs * kN == 8, "eight lanes in whole vectors");

  EightLanes() {
    for (size_t v = 0; v < kVecs; ++v) vec[v] = hn::Zero(D());
  }

  // Adds the terms of elements i .. i + 7: term(c) gives those of c .. c + kN - 1 as a vector.
  template <typename Term>
  HWY_INLINE void AddEight(int64_t i, const Term& term) {
    for (size_t v = 0; v < kVecs; ++v) vec[v] = hn::Add(vec[v], term(i + v * kN));
  }

  // lanes[k] = accumulator k, k < 8.
  HWY_INLINE void Store(T* lanes) const {
    for (size_t v = 0; v < kVecs; ++v) hn::StoreU(vec[v], D(), lanes + v * kN);
  }

  hn::Vec<D> vec[kVecs];
};

}  // namespace mt::ops::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // MT_CORE_OPS_EIGHT_LANES_INL_H_
