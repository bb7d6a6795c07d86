// Vectorisable f32 math for CPU kernels: a branch-free exp for x <= 0, and eight-lane
// vector helpers (exp, small matrix products). Internal to core/ops.
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

// ---- Eight-lane f32 vectors (GCC/Clang vector extension) ----
//
// Loops over the scalar helpers above do not always vectorise (GCC keeps selects scalar under the
// default -ftrapping-math); the kernels that need the speed (fused attention) use these.

// Eight floats (one AVX register under -march=x86-64-v3; GCC/Clang vector extension).
typedef float V8 __attribute__((vector_size(32)));

inline V8 LoadV8(const float* p) {
  V8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void StoreV8(float* p, V8 v) { std::memcpy(p, &v, sizeof v); }
inline V8 SplatV8(float x) { return V8{x, x, x, x, x, x, x, x}; }

// C[r, 0:N) += sum_{k < K} A[r, k] B[k, 0:N) for R rows, with R x 8V outputs in registers across
// the k loop (enough independent multiply-adds to hide their latency, one load of B per R of
// them). Each C[r, n] adds its K products in order, whatever the blocking.
template <int R, int V>
void RowBlockTimesMatrix(const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                         int64_t ldc, int64_t K, int64_t N) {
  constexpr int kW = 8 * V;
  int64_t n0 = 0;
  for (; n0 + kW <= N; n0 += kW) {
    V8 acc[R][V];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (int u = 0; u < V; ++u) acc[r][u] = LoadV8(c + r * ldc + n0 + 8 * u);
    }
    const float* bk = b + n0;
    for (int64_t k = 0; k < K; ++k, bk += ldb) {
      V8 bv[V];
#pragma GCC unroll 8
      for (int u = 0; u < V; ++u) bv[u] = LoadV8(bk + 8 * u);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const V8 ar = SplatV8(a[r * lda + k]);
#pragma GCC unroll 8
        for (int u = 0; u < V; ++u) acc[r][u] += ar * bv[u];
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (int u = 0; u < V; ++u) StoreV8(c + r * ldc + n0 + 8 * u, acc[r][u]);
    }
  }
  for (; n0 + 8 <= N; n0 += 8) {
    for (int r = 0; r < R; ++r) {
      V8 acc = LoadV8(c + r * ldc + n0);
      const float* bk = b + n0;
      for (int64_t k = 0; k < K; ++k, bk += ldb) acc += SplatV8(a[r * lda + k]) * LoadV8(bk);
      StoreV8(c + r * ldc + n0, acc);
    }
  }
  for (; n0 < N; ++n0) {
    for (int r = 0; r < R; ++r) {
      float x = c[r * ldc + n0];
      for (int64_t k = 0; k < K; ++k) x += a[r * lda + k] * b[k * ldb + n0];
      c[r * ldc + n0] = x;
    }
  }
}

// C[M, N] += A[M, K] B[K, N], row-major with row strides lda, ldb, ldc: small products that stay
// in cache (fused attention's tiles: M, N, K up to the tile sizes and the head dim). Each C[r, n]
// adds its K products in order, so a row's result does not depend on M or on the row's position.
inline void MatMulAcc(const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                      int64_t ldc, int64_t M, int64_t K, int64_t N) {
  int64_t r = 0;
  for (; r + 4 <= M; r += 4) {
    RowBlockTimesMatrix<4, 2>(a + r * lda, lda, b, ldb, c + r * ldc, ldc, K, N);
  }
  for (; r < M; ++r) RowBlockTimesMatrix<1, 4>(a + r * lda, lda, b, ldb, c + r * ldc, ldc, K, N);
}

// Eight int32 lanes, for building exponent bits.
typedef int32_t I8 __attribute__((vector_size(32)));

// ExpNonPositive (relative error below 3e-7 for x <= 0, 0 below -87.3) on eight lanes: the same
// range reduction and polynomial in vector operations (GCC does not if-convert the scalar
// version's selects under the default -ftrapping-math, so loops over it stay scalar).
// n = round(x log2 e) comes from adding and subtracting 1.5 * 2^23 (round half to even, where
// ExpNonPositive rounds half up: either n is a valid reduction).
inline V8 ExpNonPositiveV8(V8 x) {
  const V8 lo = SplatV8(-87.3f);
  x = x < lo ? lo : x;
  const V8 magic = SplatV8(12582912.0f);
  const V8 n = (x * SplatV8(1.44269504088896341f) + magic) - magic;
  const V8 r = (x - n * SplatV8(0.693145751953125f)) - n * SplatV8(1.428606765330187045e-06f);
  V8 p = SplatV8(1.0f / 720.0f);
  p = p * r + SplatV8(1.0f / 120.0f);
  p = p * r + SplatV8(1.0f / 24.0f);
  p = p * r + SplatV8(1.0f / 6.0f);
  p = p * r + SplatV8(0.5f);
  p = p * r + SplatV8(1.0f);
  p = p * r + SplatV8(1.0f);
  const I8 bits = (__builtin_convertvector(n, I8) + 127) << 23;
  V8 scale;
  std::memcpy(&scale, &bits, sizeof scale);
  const V8 y = p * scale;
  return x <= lo ? SplatV8(0.0f) : y;
}

// y[j] = exp(min(a x[j] - b, 0)) for j < n: softmax terms with the row maximum (forward) or the
// log-sum-exp (backward) subtracted; exp(-inf) = 0. y may be x.
inline void ExpTerms(const float* x, float a, float b, int64_t n, float* y) {
  const V8 av = SplatV8(a), bv = SplatV8(b), zero = SplatV8(0.0f);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const V8 t = av * LoadV8(x + j) - bv;
    StoreV8(y + j, ExpNonPositiveV8(t < zero ? t : zero));
  }
  for (; j < n; ++j) y[j] = ExpNonPositive(std::min(a * x[j] - b, 0.0f));
}

}  // namespace internal
}  // namespace ops
}  // namespace mt

#endif  // MT_CORE_OPS_FAST_MATH_H_
