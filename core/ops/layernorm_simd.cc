// Highway compiles this file once per SIMD target (hwy/foreach_target.h re-includes it).
#include "core/ops/layernorm_simd.h"

#include <cmath>
#include <cstdint>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/ops/layernorm_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// After highway.h, once per target.
#include "core/ops/eight_lanes-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mt::ops::internal::HWY_NAMESPACE {
namespace hn = ::hwy::HWY_NAMESPACE;

// The eight sum lanes of layernorm_simd.h in vectors of four or eight lanes; the element-wise
// passes use the same vectors.
using Acc = EightLanes<float>;
using D8 = Acc::D;
using V8 = hn::Vec<D8>;
constexpr size_t kN = Acc::kN;

inline float Combine(const float* l) {
  return ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
}

// The eight-lane sum of term(c) over c < n: vec(c) gives the terms c .. c + kN - 1 as a vector,
// scalar(c) one term computed with the same roundings (the last n mod 8).
template <typename VecTerm, typename ScalarTerm>
HWY_INLINE float SumLanes(int64_t n, const VecTerm& vec, const ScalarTerm& scalar) {
  Acc acc;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc.AddEight(i, vec);
  float lanes[8];
  acc.Store(lanes);
  for (int k = 0; i < n; ++i, ++k) lanes[k] += scalar(i);
  return Combine(lanes);
}

void LayerNormRow(const float* x, const float* gamma, const float* beta, float eps, int64_t C,
                  float* y, float* mean, float* rstd) {
  const D8 d;
  const float mu =
      SumLanes(
          C, [&](int64_t c) { return hn::LoadU(d, x + c); }, [&](int64_t c) { return x[c]; }) /
      static_cast<float>(C);
  const V8 vmu = hn::Set(d, mu);
  const float var = SumLanes(
                        C,
                        [&](int64_t c) {
                          const V8 t = hn::Sub(hn::LoadU(d, x + c), vmu);
                          return hn::Mul(t, t);
                        },
                        [&](int64_t c) {
                          const float t = x[c] - mu;
                          return t * t;
                        }) /
                    static_cast<float>(C);
  const float rs = 1.0f / std::sqrt(var + eps);
  *mean = mu;
  *rstd = rs;
  const V8 vrs = hn::Set(d, rs);
  int64_t c = 0;
  for (; c + static_cast<int64_t>(kN) <= C; c += kN) {
    const V8 xhat = hn::Mul(hn::Sub(hn::LoadU(d, x + c), vmu), vrs);
    hn::StoreU(hn::Add(hn::Mul(xhat, hn::LoadU(d, gamma + c)), hn::LoadU(d, beta + c)), d, y + c);
  }
  for (; c < C; ++c) y[c] = ((x[c] - mu) * rs) * gamma[c] + beta[c];
}

void LayerNormGradRow(const float* x, const float* dy, const float* gamma, float mean, float rstd,
                      int64_t C, float* dx, float* dgamma, float* dbeta) {
  const D8 d;
  const V8 vmu = hn::Set(d, mean), vrs = hn::Set(d, rstd);
  // Pass 1: the parameter gradients, and the lanes of sum(g) and sum(g xhat).
  Acc acc_g, acc_gx;
  int64_t i = 0;
  for (; i + 8 <= C; i += 8) {
    for (size_t v = 0; v < Acc::kVecs; ++v) {
      const int64_t c = i + v * kN;
      const V8 dv = hn::LoadU(d, dy + c);
      const V8 xhat = hn::Mul(hn::Sub(hn::LoadU(d, x + c), vmu), vrs);
      hn::StoreU(hn::Add(hn::LoadU(d, dgamma + c), hn::Mul(dv, xhat)), d, dgamma + c);
      hn::StoreU(hn::Add(hn::LoadU(d, dbeta + c), dv), d, dbeta + c);
      const V8 g = hn::Mul(dv, hn::LoadU(d, gamma + c));
      acc_g.vec[v] = hn::Add(acc_g.vec[v], g);
      acc_gx.vec[v] = hn::Add(acc_gx.vec[v], hn::Mul(g, xhat));
    }
  }
  float lanes_g[8], lanes_gx[8];
  acc_g.Store(lanes_g);
  acc_gx.Store(lanes_gx);
  for (int k = 0; i < C; ++i, ++k) {
    const float xhat = (x[i] - mean) * rstd;
    dgamma[i] += dy[i] * xhat;
    dbeta[i] += dy[i];
    const float g = dy[i] * gamma[i];
    lanes_g[k] += g;
    lanes_gx[k] += g * xhat;
  }
  const float inv_c = 1.0f / static_cast<float>(C);
  const float mean_g = Combine(lanes_g) * inv_c, mean_gx = Combine(lanes_gx) * inv_c;
  // Pass 2: dx (reads x and dy at c before writing dx at c).
  const V8 vmg = hn::Set(d, mean_g), vmgx = hn::Set(d, mean_gx);
  int64_t c = 0;
  for (; c + static_cast<int64_t>(kN) <= C; c += kN) {
    const V8 xhat = hn::Mul(hn::Sub(hn::LoadU(d, x + c), vmu), vrs);
    const V8 g = hn::Mul(hn::LoadU(d, dy + c), hn::LoadU(d, gamma + c));
    hn::StoreU(hn::Mul(vrs, hn::Sub(hn::Sub(g, vmg), hn::Mul(xhat, vmgx))), d, dx + c);
  }
  for (; c < C; ++c) {
    const float xhat = (x[c] - mean) * rstd;
    const float g = dy[c] * gamma[c];
    dx[c] = rstd * ((g - mean_g) - xhat * mean_gx);
  }
}

}  // namespace mt::ops::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mt::ops::internal {

HWY_EXPORT(LayerNormRow);
HWY_EXPORT(LayerNormGradRow);

void LayerNormRow(const float* x, const float* gamma, const float* beta, float eps, int64_t C,
                  float* y, float* mean, float* rstd) {
  HWY_DYNAMIC_DISPATCH(LayerNormRow)(x, gamma, beta, eps, C, y, mean, rstd);
}

void LayerNormGradRow(const float* x, const float* dy, const float* gamma, float mean, float rstd,
                      int64_t C, float* dx, float* dgamma, float* dbeta) {
  HWY_DYNAMIC_DISPATCH(LayerNormGradRow)(x, dy, gamma, mean, rstd, C, dx, dgamma, dbeta);
}

}  // namespace mt::ops::internal
#endif  // HWY_ONCE
