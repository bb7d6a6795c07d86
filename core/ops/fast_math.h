// f32 math for CPU kernels: a branch-free exp for x <= 0, and SIMD kernels with runtime dispatch
// built on it (softmax terms, their sum, a row's maximum, small matrix products, the masking and
// gradients of a row of attention scores). Internal to core/ops.
#ifndef MT_CORE_OPS_FAST_MATH_H_
#define MT_CORE_OPS_FAST_MATH_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace mt {
namespace ops {
namespace internal {

// exp(x) for x <= 0 (softmax terms after subtracting the row max), relative error below 3e-7;
// exactly 0 below -87.3 (where expf underflows anyway). Branch-free so that loops over it
// vectorise (glibc's expf does not without -ffast-math).
// Method: x = n ln2 + r with |r| <= ln2/2, exp(r) by a degree-6 Taylor polynomial, 2^n by
// building the exponent bits.
inline float ExpNonPositive(float x) {
  x = x < -87.3f ? -87.3f : x;
  // floor(v + 0.5) rather than round(v): it vectorises (AVX2 has no round-half-away).
  const float n = __builtin_floorf(x * 1.44269504088896341f + 0.5f);
  // r = x - n ln2, with ln2 split in two parts for accuracy (Cody-Waite).
  const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187045e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return x <= -87.3f ? 0.0f : p * scale;
}

// ---- SIMD kernels with runtime dispatch (core/simd.h; fast_math_simd.cc) ----
//
// Each runs the best Highway target of the CPU. The exponentials use ExpNonPositive's method in
// correctly rounded lane operations (no fused multiply-add), and the tail of a range goes through
// the same vector code as its body: an element's bits depend on its value alone, at every target.

// y[j] = c exp(min(a x[j] - b, 0)) for j < n (relative error below 3e-7 in the exp; 0 where
// a x[j] - b < -87.3, e.g. -inf, and NaN for NaN): softmax terms with the row maximum (forward)
// or the log-sum-exp (backward) subtracted, scaled by c. y may be x.
void ScaledExpTerms(const float* x, float a, float b, float c, int64_t n, float* y);

// ScaledExpTerms with c = 1.
inline void ExpTerms(const float* x, float a, float b, int64_t n, float* y) {
  ScaledExpTerms(x, a, b, 1.0f, n, y);
}

// sum_j exp(min(x[j] - b, 0)) over j < n: the terms of ExpTerms(x, 1, b, ...) summed in eight f32
// lanes (term j into lane j mod 8, in order), then the lanes in f64. The result depends on n and
// the values only, not on the SIMD target.
double SumExpTerms(const float* x, float b, int64_t n);

// max_j x[j] over j < n; -inf for n = 0. With a NaN among the values the result may be NaN or
// the maximum of the others, depending on the NaN's position and the target (a loss or softmax
// built on it is NaN either way); of a +0 and a -0, either may be returned.
float MaxF32(const float* x, int64_t n);

// C[M, N] += A[M, K] B[K, N], row-major with row strides lda, ldb, ldc: small products that stay
// in cache (fused attention's tiles: M, N, K up to the tile sizes and the head dim). Each C[r, n]
// adds its K products in order, each one fused (a multiply-add rounded once) on targets with FMA
// and rounded twice on the others, so a row's result does not depend on M, on the row's position
// or on its column's position (the column tail computes as the vectors do).
void MatMulAcc(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
               int64_t M, int64_t K, int64_t N);

// ---- Rows of attention scores (fused attention's inner loops) ----
//
// Element-wise, with one rounding per lane operation in the order written, so that every target
// and the scalar tails give the same bits.

// x[j] = scale x[j] where j < n_vis and mask[j] != 0 (mask may be null: no padding mask), and
// x[j] = fill elsewhere, for j < n: a row of scores with the causally masked keys (n_vis on) and
// the padding-masked ones set to fill. n >= 0; n_vis may be below 0 or above n.
void ScaleAndMask(float* x, float scale, int64_t n_vis, const int32_t* mask, int64_t n, float fill);

// x[j] = a x[j] for j < n.
void ScaleF32(float* x, float a, int64_t n);

// x[j] = x[j] f[j] for j < n.
void MulF32(float* x, const float* f, int64_t n);

// The gradient of a row of raw attention scores from its probabilities p (in pd), the products
// dp = dout . v_j and the row's D_i = d: ds[j] = (scale p[j]) (dp[j] f[j] - d), where f is the
// dropout factor of each probability (factor may be null: f = 1); with a factor, pd[j] becomes
// p[j] f[j] (the probability that multiplied v). For j < n.
void ScoreGrads(float* pd, const float* dp, const float* factor, float scale, float d, int64_t n,
                float* ds);

}  // namespace internal
}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_FAST_MATH_H_
