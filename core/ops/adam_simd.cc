// Highway compiles this file once per SIMD target (hwy/foreach_target.h re-includes it).
#include "core/ops/adam_simd.h"

#include <cmath>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/ops/adam_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace mt::ops::internal::HWY_NAMESPACE {
namespace hn = ::hwy::HWY_NAMESPACE;

// One element, in adam.h's order; the tail of AdamRange, and its reference for the lanes.
inline void AdamScalar(const AdamConstants& c, float* param, const float* grad, float* m, float* v,
                       int64_t i) {
  const float p = param[i];
  float g = grad[i] * c.grad_scale;
  if (!c.decoupled) g += c.weight_decay * p;
  const float mi = c.beta1 * m[i] + c.one_minus_beta1 * g;
  const float vi = c.beta2 * v[i] + c.one_minus_beta2 * (g * g);
  m[i] = mi;
  v[i] = vi;
  const float update = (mi / c.bias_correction1) / (std::sqrt(vi / c.bias_correction2) + c.eps);
  param[i] = c.decoupled ? p - c.lr * (update + c.weight_decay * p) : p - c.lr * update;
}

void AdamRange(const AdamConstants& c, float* HWY_RESTRICT param, const float* HWY_RESTRICT grad,
               float* HWY_RESTRICT m, float* HWY_RESTRICT v, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto b1 = hn::Set(d, c.beta1), b2 = hn::Set(d, c.beta2);
  const auto omb1 = hn::Set(d, c.one_minus_beta1), omb2 = hn::Set(d, c.one_minus_beta2);
  const auto bc1 = hn::Set(d, c.bias_correction1), bc2 = hn::Set(d, c.bias_correction2);
  const auto lr = hn::Set(d, c.lr), eps = hn::Set(d, c.eps), wd = hn::Set(d, c.weight_decay);
  const auto scale = hn::Set(d, c.grad_scale);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto p = hn::LoadU(d, param + i);
    auto g = hn::Mul(hn::LoadU(d, grad + i), scale);
    if (!c.decoupled) g = hn::Add(g, hn::Mul(wd, p));
    const auto mi = hn::Add(hn::Mul(b1, hn::LoadU(d, m + i)), hn::Mul(omb1, g));
    const auto vi = hn::Add(hn::Mul(b2, hn::LoadU(d, v + i)), hn::Mul(omb2, hn::Mul(g, g)));
    hn::StoreU(mi, d, m + i);
    hn::StoreU(vi, d, v + i);
    const auto update = hn::Div(hn::Div(mi, bc1), hn::Add(hn::Sqrt(hn::Div(vi, bc2)), eps));
    const auto step = c.decoupled ? hn::Add(update, hn::Mul(wd, p)) : update;
    hn::StoreU(hn::Sub(p, hn::Mul(lr, step)), d, param + i);
  }
  for (; i < n; ++i) AdamScalar(c, param, grad, m, v, i);
}

}  // namespace mt::ops::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mt::ops::internal {

HWY_EXPORT(AdamRange);

void AdamRange(const AdamConstants& c, float* param, const float* grad, float* m, float* v,
               int64_t n) {
  HWY_DYNAMIC_DISPATCH(AdamRange)(c, param, grad, m, v, n);
}

}  // namespace mt::ops::internal
#endif  // HWY_ONCE
