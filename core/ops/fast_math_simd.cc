// Highway compiles this file once per SIMD target (hwy/foreach_target.h re-includes it): the
// dispatched kernels of fast_math.h.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>

#include "core/ops/fast_math.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/ops/fast_math_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// After highway.h, once per target.
#include "core/ops/eight_lanes-inl.h"
#include "core/ops/vector_range-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mt::ops::internal::HWY_NAMESPACE {
namespace hn = ::hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// ExpNonPositive on lanes: n = round(x log2 e) by adding and subtracting 1.5 * 2^23 (round half
// to even, where the scalar version rounds half up: either n is a valid reduction), the same
// Cody-Waite reduction and polynomial, 2^n from the exponent bits. NaN stays NaN.
template <class D>
HWY_INLINE hn::Vec<D> ExpNonPositiveVec(D d, hn::Vec<D> x) {
  const hn::RebindToSigned<D> di;
  const auto lo = hn::Set(d, -87.3f);
  x = hn::IfThenElse(hn::Lt(x, lo), lo, x);
  const auto magic = hn::Set(d, 12582912.0f);
  const auto n = hn::Sub(hn::Add(hn::Mul(x, hn::Set(d, 1.44269504088896341f)), magic), magic);
  const auto r = hn::Sub(hn::Sub(x, hn::Mul(n, hn::Set(d, 0.693145751953125f))),
                         hn::Mul(n, hn::Set(d, 1.428606765330187045e-06f)));
  auto p = hn::Set(d, 1.0f / 720.0f);
  p = hn::Add(hn::Mul(p, r), hn::Set(d, 1.0f / 120.0f));
  p = hn::Add(hn::Mul(p, r), hn::Set(d, 1.0f / 24.0f));
  p = hn::Add(hn::Mul(p, r), hn::Set(d, 1.0f / 6.0f));
  p = hn::Add(hn::Mul(p, r), hn::Set(d, 0.5f));
  p = hn::Add(hn::Mul(p, r), hn::Set(d, 1.0f));
  p = hn::Add(hn::Mul(p, r), hn::Set(d, 1.0f));
  const auto bits = hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n), hn::Set(di, 127)));
  const auto y = hn::Mul(p, hn::BitCast(d, bits));
  return hn::IfThenElse(hn::Le(x, lo), hn::Zero(d), y);
}

// c exp(min(a x - b, 0)) on lanes (min keeps a NaN argument).
template <class D>
HWY_INLINE hn::Vec<D> ScaledExpTerm(D d, hn::Vec<D> x, float a, float b, float c) {
  const auto t = hn::Sub(hn::Mul(hn::Set(d, a), x), hn::Set(d, b));
  const auto clamped = hn::IfThenElse(hn::Gt(t, hn::Zero(d)), hn::Zero(d), t);
  return hn::Mul(hn::Set(d, c), ExpNonPositiveVec(d, clamped));
}

void ScaledExpTerms(const float* x, float a, float b, float c, int64_t n, float* y) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t j = 0;
  for (; j + lanes <= n; j += lanes) {
    hn::StoreU(ScaledExpTerm(d, hn::LoadU(d, x + j), a, b, c), d, y + j);
  }
  if (j == n) return;
  // The tail through a zero-padded copy: the same vector code as the body.
  HWY_ALIGN float buf[HWY_MAX_BYTES / sizeof(float)] = {};
  std::copy(x + j, x + n, buf);
  hn::Store(ScaledExpTerm(d, hn::Load(d, buf), a, b, c), d, buf);
  std::copy(buf, buf + (n - j), y + j);
}

double SumExpTerms(const float* x, float b, int64_t n) {
  using Acc = EightLanes<float>;
  const Acc::D d;
  Acc acc;
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    acc.AddEight(j,
                 [&](int64_t c) { return ScaledExpTerm(d, hn::LoadU(d, x + c), 1.0f, b, 1.0f); });
  }
  float lanes[8] = {};
  if (j < n) {
    // The last n - j < 8 terms into lanes 0 .. n - j - 1, the others adding +0.
    std::copy(x + j, x + n, lanes);
    acc.AddEight(0, [&](int64_t c) {
      const int64_t valid = std::clamp<int64_t>(n - j - c, 0, Acc::kN);
      return hn::IfThenElseZero(hn::FirstN(d, valid),
                                ScaledExpTerm(d, hn::LoadU(d, lanes + c), 1.0f, b, 1.0f));
    });
  }
  acc.Store(lanes);
  double s = 0.0;
  for (float lane : lanes) s += lane;
  return s;
}

float MaxF32(const float* x, int64_t n) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  // Four vectors of running maxima: independent compares to hide their latency.
  VF m0 = hn::Set(d, -HUGE_VALF), m1 = m0, m2 = m0, m3 = m0;
  int64_t j = 0;
  for (; j + 4 * lanes <= n; j += 4 * lanes) {
    m0 = hn::Max(m0, hn::LoadU(d, x + j));
    m1 = hn::Max(m1, hn::LoadU(d, x + j + lanes));
    m2 = hn::Max(m2, hn::LoadU(d, x + j + 2 * lanes));
    m3 = hn::Max(m3, hn::LoadU(d, x + j + 3 * lanes));
  }
  for (; j + lanes <= n; j += lanes) m0 = hn::Max(m0, hn::LoadU(d, x + j));
  float m = hn::GetLane(hn::MaxOfLanes(d, hn::Max(hn::Max(m0, m1), hn::Max(m2, m3))));
  for (; j < n; ++j) m = std::max(m, x[j]);
  return m;
}

// One scalar multiply-add rounded as the target's hn::MulAdd rounds it.
HWY_INLINE float ScalarMulAdd(float a, float b, float c) {
#if HWY_NATIVE_FMA
  return std::fma(a, b, c);
#else
  return a * b + c;  // Two roundings (the library is built with -ffp-contract=off).
#endif
}

// C[r, 0:N) += sum_{k < K} A[r, k] B[k, 0:N) for R rows, with R x V vectors of outputs in
// registers across the k loop (enough independent multiply-adds to hide their latency, one load
// of B per R of them); then single vectors, then single columns. Each C[r, n] adds its K products
// in order, whatever the blocking.
template <int R, int V>
HWY_INLINE void RowBlockTimesMatrix(const float* a, int64_t lda, const float* b, int64_t ldb,
                                    float* c, int64_t ldc, int64_t K, int64_t N) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t n0 = 0;
  for (; n0 + V * lanes <= N; n0 += V * lanes) {
    // Fully unrolled, so that the accumulators live in registers.
    VF acc[R][V];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (int u = 0; u < V; ++u) acc[r][u] = hn::LoadU(d, c + r * ldc + n0 + u * lanes);
    }
    const float* bk = b + n0;
    for (int64_t k = 0; k < K; ++k, bk += ldb) {
      VF bv[V];
#pragma GCC unroll 8
      for (int u = 0; u < V; ++u) bv[u] = hn::LoadU(d, bk + u * lanes);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const VF ar = hn::Set(d, a[r * lda + k]);
#pragma GCC unroll 8
        for (int u = 0; u < V; ++u) acc[r][u] = hn::MulAdd(ar, bv[u], acc[r][u]);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (int u = 0; u < V; ++u) hn::StoreU(acc[r][u], d, c + r * ldc + n0 + u * lanes);
    }
  }
  for (; n0 + lanes <= N; n0 += lanes) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      VF acc = hn::LoadU(d, c + r * ldc + n0);
      const float* bk = b + n0;
      for (int64_t k = 0; k < K; ++k, bk += ldb) {
        acc = hn::MulAdd(hn::Set(d, a[r * lda + k]), hn::LoadU(d, bk), acc);
      }
      hn::StoreU(acc, d, c + r * ldc + n0);
    }
  }
  for (; n0 < N; ++n0) {
    for (int r = 0; r < R; ++r) {
      float x = c[r * ldc + n0];
      for (int64_t k = 0; k < K; ++k) x = ScalarMulAdd(a[r * lda + k], b[k * ldb + n0], x);
      c[r * ldc + n0] = x;
    }
  }
}

void MatMulAcc(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
               int64_t M, int64_t K, int64_t N) {
  int64_t r = 0;
  for (; r + 4 <= M; r += 4) {
    RowBlockTimesMatrix<4, 2>(a + r * lda, lda, b, ldb, c + r * ldc, ldc, K, N);
  }
  for (; r < M; ++r) RowBlockTimesMatrix<1, 4>(a + r * lda, lda, b, ldb, c + r * ldc, ldc, K, N);
}

void ScaleAndMask(float* x, float scale, int64_t n_vis, const int32_t* mask, int64_t n,
                  float fill) {
  const DF d;
  const hn::RebindToSigned<DF> di;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t vis = std::clamp<int64_t>(n_vis, 0, n);
  const auto vscale = hn::Set(d, scale);
  const auto vfill = hn::Set(d, fill);
  int64_t j = 0;
  // Whole vectors of visible keys: only the padding mask decides.
  for (; j + lanes <= vis; j += lanes) {
    const VF y = hn::Mul(vscale, hn::LoadU(d, x + j));
    if (mask == nullptr) {
      hn::StoreU(y, d, x + j);
    } else {
      const auto keep = hn::RebindMask(d, hn::Ne(hn::LoadU(di, mask + j), hn::Zero(di)));
      hn::StoreU(hn::IfThenElse(keep, y, vfill), d, x + j);
    }
  }
  // The last visible keys one by one (a single product each: the same bits), then the rest.
  for (; j < vis; ++j) x[j] = mask == nullptr || mask[j] != 0 ? scale * x[j] : fill;
  std::fill(x + vis, x + n, fill);
}

void ScaleF32(float* x, float a, int64_t n) {
  MapVectors<1, 1>(n, {x}, {x}, [a](DF d, const VF* v) {
    return std::array<VF, 1>{hn::Mul(hn::Set(d, a), v[0])};
  });
}

void MulF32(float* x, const float* f, int64_t n) {
  MapVectors<2, 1>(n, {x, f}, {x},
                   [](DF, const VF* v) { return std::array<VF, 1>{hn::Mul(v[0], v[1])}; });
}

void ScoreGrads(float* pd, const float* dp, const float* factor, float scale, float d_i, int64_t n,
                float* ds) {
  if (factor == nullptr) {
    MapVectors<2, 1>(n, {pd, dp}, {ds}, [scale, d_i](DF d, const VF* v) {
      return std::array<VF, 1>{
          hn::Mul(hn::Mul(hn::Set(d, scale), v[0]), hn::Sub(v[1], hn::Set(d, d_i)))};
    });
    return;
  }
  MapVectors<3, 2>(n, {pd, dp, factor}, {pd, ds}, [scale, d_i](DF d, const VF* v) {
    return std::array<VF, 2>{
        hn::Mul(v[0], v[2]),
        hn::Mul(hn::Mul(hn::Set(d, scale), v[0]), hn::Sub(hn::Mul(v[1], v[2]), hn::Set(d, d_i)))};
  });
}

}  // namespace mt::ops::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mt::ops::internal {

HWY_EXPORT(ScaledExpTerms);
HWY_EXPORT(SumExpTerms);
HWY_EXPORT(MaxF32);
HWY_EXPORT(MatMulAcc);
HWY_EXPORT(ScaleAndMask);
HWY_EXPORT(ScaleF32);
HWY_EXPORT(MulF32);
HWY_EXPORT(ScoreGrads);

void ScaledExpTerms(const float* x, float a, float b, float c, int64_t n, float* y) {
  HWY_DYNAMIC_DISPATCH(ScaledExpTerms)(x, a, b, c, n, y);
}

double SumExpTerms(const float* x, float b, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(SumExpTerms)(x, b, n);
}

float MaxF32(const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(MaxF32)(x, n); }

void MatMulAcc(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
               int64_t M, int64_t K, int64_t N) {
  HWY_DYNAMIC_DISPATCH(MatMulAcc)(a, lda, b, ldb, c, ldc, M, K, N);
}

void ScaleAndMask(float* x, float scale, int64_t n_vis, const int32_t* mask, int64_t n,
                  float fill) {
  HWY_DYNAMIC_DISPATCH(ScaleAndMask)(x, scale, n_vis, mask, n, fill);
}

void ScaleF32(float* x, float a, int64_t n) { HWY_DYNAMIC_DISPATCH(ScaleF32)(x, a, n); }

void MulF32(float* x, const float* f, int64_t n) { HWY_DYNAMIC_DISPATCH(MulF32)(x, f, n); }

void ScoreGrads(float* pd, const float* dp, const float* factor, float scale, float d, int64_t n,
                float* ds) {
  HWY_DYNAMIC_DISPATCH(ScoreGrads)(pd, dp, factor, scale, d, n, ds);
}

}  // namespace mt::ops::internal
#endif  // HWY_ONCE
