// Highway compiles this file once per SIMD target (hwy/foreach_target.h re-includes it).
#include "core/ops/convert_simd.h"

#include <cstdint>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/ops/convert_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace mt::ops::internal::HWY_NAMESPACE {
namespace hn = ::hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DU32 = hn::RebindToUnsigned<DF>;
using DI32 = hn::RebindToSigned<DF>;
using DU16 = hn::Rebind<uint16_t, DF>;

// Whole vectors here; the last n % lanes elements go through the scalar conversion, which
// computes the same bits.
void Bf16ToF32Range(const bf16* src, int64_t n, float* dst) {
  const DF df;
  const DU32 du32;
  const DU16 du16;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const uint16_t* in = reinterpret_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto wide = hn::ShiftLeft<16>(hn::PromoteTo(du32, hn::LoadU(du16, in + i)));
    hn::StoreU(hn::BitCast(df, wide), df, dst + i);
  }
  for (; i < n; ++i) dst[i] = Bf16ToFloat(src[i]);
}

void F32ToBf16Range(const float* src, int64_t n, bf16* dst) {
  const DF df;
  const DU32 du32;
  const DI32 di32;
  const DU16 du16;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  uint16_t* out = reinterpret_cast<uint16_t*>(dst);
  const auto abs_mask = hn::Set(di32, 0x7fffffff);
  const auto inf = hn::Set(di32, 0x7f800000);
  const auto half = hn::Set(du32, 0x7fffu);
  const auto one = hn::Set(du32, 1u);
  const auto quiet = hn::Set(du32, 0x0040u);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto u = hn::BitCast(du32, hn::LoadU(df, src + i));
    const auto is_nan = hn::Gt(hn::And(hn::BitCast(di32, u), abs_mask), inf);
    const auto high = hn::ShiftRight<16>(u);
    const auto rounded = hn::ShiftRight<16>(hn::Add(u, hn::Add(half, hn::And(high, one))));
    const auto bits = hn::IfThenElse(hn::RebindMask(du32, is_nan), hn::Or(high, quiet), rounded);
    // Every lane is below 2^16, so the saturating narrowing keeps it as it is.
    hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di32, bits)), du16, out + i);
  }
  for (; i < n; ++i) dst[i] = FloatToBf16(src[i]);
}

void F16ToF32Range(const f16* src, int64_t n, float* dst) {
  const DF df;
  const DU16 du16;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const hwy::float16_t* in = reinterpret_cast<const hwy::float16_t*>(src);
  const auto exponent = hn::Set(du16, 0x7c00);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    // Infinities and NaNs go through the scalar conversion: the hardware's (F16C) quiets a
    // signalling NaN, HalfToFloat keeps its bits.
    const auto raw = hn::LoadU(du16, reinterpret_cast<const uint16_t*>(in + i));
    if (!hn::AllFalse(du16, hn::Eq(hn::And(raw, exponent), exponent))) {
      for (int64_t j = i; j < i + lanes; ++j) dst[j] = HalfToFloat(src[j]);
      continue;
    }
    hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, in + i)), df, dst + i);
  }
  for (; i < n; ++i) dst[i] = HalfToFloat(src[i]);
}

}  // namespace mt::ops::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mt::ops::internal {

HWY_EXPORT(Bf16ToF32Range);
HWY_EXPORT(F32ToBf16Range);
HWY_EXPORT(F16ToF32Range);

void Bf16ToF32Range(const bf16* src, int64_t n, float* dst) {
  HWY_DYNAMIC_DISPATCH(Bf16ToF32Range)(src, n, dst);
}

void F32ToBf16Range(const float* src, int64_t n, bf16* dst) {
  HWY_DYNAMIC_DISPATCH(F32ToBf16Range)(src, n, dst);
}

void F16ToF32Range(const f16* src, int64_t n, float* dst) {
  HWY_DYNAMIC_DISPATCH(F16ToF32Range)(src, n, dst);
}

}  // namespace mt::ops::internal
#endif  // HWY_ONCE
