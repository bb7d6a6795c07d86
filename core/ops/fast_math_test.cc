#include "core/ops/fast_math.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/simd.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using internal::ExpNonPositive;
using internal::ExpTerms;
using internal::MatMulAcc;
using internal::MaxF32;
using internal::MulF32;
using internal::ScaleAndMask;
using internal::ScaledExpTerms;
using internal::ScaleF32;
using internal::ScoreGrads;
using internal::SumExpTerms;

constexpr double kU = 0x1p-24;  // f32 unit roundoff.
constexpr float kInf = std::numeric_limits<float>::infinity();

// Uniform floats in [lo, hi) from a fixed seed.
std::vector<float> Uniform(int64_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

TEST(FastMathTest, ExpNonPositiveMatchesLibmToFewUlps) {
  double worst = 0;
  for (int i = 0; i <= 2000000; ++i) {
    const float x = -87.0f * static_cast<float>(i) / 2000000.0f;
    const double want = std::exp(static_cast<double>(x));
    const double got = ExpNonPositive(x);
    worst = std::max(worst, std::fabs(got - want) / want);
  }
  EXPECT_LT(worst, 3e-7) << worst;
  EXPECT_EQ(ExpNonPositive(0.0f), 1.0f);
  EXPECT_EQ(ExpNonPositive(-200.0f), 0.0f);
  EXPECT_EQ(ExpNonPositive(-INFINITY), 0.0f);
}

// The row maximum at every SIMD target against a scalar loop, at sizes around every vector width
// (bodies of four vectors, single vectors, scalar tails), with the maximum at the front, at the
// back and in the middle; -inf for an empty row and for a row of -inf.
TEST(FastMathTest, MaxF32IsTheMaximumAtEverySimdTarget) {
  for (const SimdTarget& target : SimdTargets()) {
    ScopedSimdTarget scope(target);
    SCOPED_TRACE(target.name);
    EXPECT_EQ(MaxF32(nullptr, 0), -kInf);
    for (int64_t n : {1, 3, 4, 7, 8, 15, 16, 17, 31, 63, 64, 65, 129, 1031}) {
      std::vector<float> x = Uniform(n, -1000.0f, -10.0f, static_cast<uint32_t>(n));
      const float want = *std::max_element(x.begin(), x.end());
      EXPECT_EQ(MaxF32(x.data(), n), want) << n;
      for (int64_t at : {int64_t{0}, n / 2, n - 1}) {
        std::vector<float> y = x;
        y[at] = 3.5f;
        EXPECT_EQ(MaxF32(y.data(), n), 3.5f) << n << " at " << at;
      }
      std::fill(x.begin(), x.end(), -kInf);
      EXPECT_EQ(MaxF32(x.data(), n), -kInf) << n;
    }
  }
}

// Each lane of the vector exp (ExpTerms with a = 1, b = 0) within the scalar version's bound of
// exp in float64 at every SIMD target, and its edge values: exactly 1 at 0, exactly 0 at and below
// -87.3 (and for -inf), NaN for NaN.
TEST(FastMathTest, VectorExpMatchesFloat64AtEverySimdTarget) {
  constexpr int kN = 2000000;
  std::vector<float> x(kN), y(kN);
  for (int i = 0; i < kN; ++i) x[i] = -87.0f * static_cast<float>(i) / kN;
  for (const SimdTarget& target : SimdTargets()) {
    ScopedSimdTarget scope(target);
    SCOPED_TRACE(target.name);
    std::fill(y.begin(), y.end(), NAN);
    ExpTerms(x.data(), 1.0f, 0.0f, kN, y.data());
    double worst = 0;
    for (int i = 0; i < kN; ++i) {
      const double want = std::exp(static_cast<double>(x[i]));
      worst = std::max(worst, std::fabs(y[i] - want) / want);
    }
    EXPECT_LT(worst, 3e-7) << worst;
    const float edges[9] = {0.0f, -0.0f, -87.3f, -87.31f, -200.0f, -kInf, -1e-30f, -87.0f, NAN};
    float out[9];
    ExpTerms(edges, 1.0f, 0.0f, 9, out);
    EXPECT_EQ(out[0], 1.0f);
    EXPECT_EQ(out[1], 1.0f);
    for (int l = 2; l < 6; ++l) EXPECT_EQ(out[l], 0.0f) << edges[l];
    EXPECT_EQ(out[6], 1.0f);
    EXPECT_NEAR(out[7], std::exp(-87.0), 3e-7 * std::exp(-87.0));
    EXPECT_TRUE(std::isnan(out[8]));
  }
}

// ScaledExpTerms over lengths that exercise the vector body, the padded tail and both together,
// at every SIMD target, against float64: c exp(min(a x - b, 0)). The argument a x - b is rounded
// in f32, which adds at most 2u |a x| + u |b| (absolute) to it, i.e. that much relative error to
// the exp; the product with c adds u. Every element's bits depend on its value alone (the same
// computed alone, in place, or at another SIMD target: the kernel has no fused multiply-adds).
TEST(FastMathTest, ScaledExpTermsMatchesFloat64WithTailsAtEverySimdTarget) {
  const float a = 0.7f, b = 1.25f, c = 0.375f;
  std::vector<std::vector<float>> first_target;
  for (const SimdTarget& target : SimdTargets()) {
    ScopedSimdTarget scope(target);
    SCOPED_TRACE(target.name);
    const std::vector<int64_t> sizes = {0, 1, 5, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 131};
    for (size_t s = 0; s < sizes.size(); ++s) {
      const int64_t n = sizes[s];
      SCOPED_TRACE(n);
      std::vector<float> x = Uniform(n, -12.0f, 4.0f, 10 + n);
      if (n > 3) x[3] = -kInf;  // A masked score.
      std::vector<float> y(n + 1, NAN);
      ScaledExpTerms(x.data(), a, b, c, n, y.data());
      EXPECT_TRUE(std::isnan(y[n])) << "wrote past n";
      for (int64_t j = 0; j < n; ++j) {
        if (std::isinf(x[j])) {
          EXPECT_EQ(y[j], 0.0f) << j;
          continue;
        }
        const double t = static_cast<double>(a) * x[j] - b;
        const double want = c * std::exp(std::min(t, 0.0));
        const double tol = want * (3e-7 + kU + 2 * kU * std::fabs(a * x[j]) + kU * b);
        EXPECT_NEAR(y[j], want, tol) << j << ": x " << x[j];
        float alone = NAN;
        ScaledExpTerms(x.data() + j, a, b, c, 1, &alone);
        EXPECT_EQ(FloatBits(alone), FloatBits(y[j])) << j;
      }
      std::vector<float> z = x;
      ScaledExpTerms(z.data(), a, b, c, n, z.data());
      for (int64_t j = 0; j < n; ++j) EXPECT_EQ(FloatBits(z[j]), FloatBits(y[j])) << j;
      y.pop_back();
      if (first_target.size() < sizes.size()) {
        first_target.push_back(y);
      } else {
        EXPECT_EQ(y, first_target[s]) << "differs from " << SimdTargets()[0].name;
      }
      // ExpTerms is the c = 1 case.
      std::vector<float> unscaled(n), want(n);
      ExpTerms(x.data(), a, b, n, unscaled.data());
      ScaledExpTerms(x.data(), a, b, 1.0f, n, want.data());
      EXPECT_EQ(unscaled, want);
    }
  }
}

// SumExpTerms against float64 (each term within 3e-7 + 2u relative, and the f32 lane sums add
// (n / 8) u of the total) and bitwise equal at every SIMD target.
TEST(FastMathTest, SumExpTermsMatchesFloat64AtEverySimdTarget) {
  const std::vector<int64_t> sizes = {0, 1, 3, 7, 8, 9, 12, 16, 17, 100, 50257};
  std::vector<double> first;
  for (const SimdTarget& target : SimdTargets()) {
    ScopedSimdTarget scope(target);
    SCOPED_TRACE(target.name);
    for (size_t s = 0; s < sizes.size(); ++s) {
      const int64_t n = sizes[s];
      SCOPED_TRACE(n);
      std::vector<float> x = Uniform(n, -20.0f, 3.0f, 40 + n);
      if (n > 5) x[5] = -kInf;
      const float b = 3.0f;
      double want = 0;
      for (float v : x) want += std::exp(std::min(static_cast<double>(v) - b, 0.0));
      const double got = SumExpTerms(x.data(), b, n);
      EXPECT_NEAR(got, want, want * (3e-7 + 2 * kU + (n / 8 + 1) * kU) + 1e-300);
      if (first.size() < sizes.size()) {
        first.push_back(got);
      } else {
        EXPECT_EQ(got, first[s]);
      }
    }
  }
}

// MatMulAcc accumulates A B into C: against float64 at every SIMD target, over shapes that hit
// the 4-row and 1-row blocks, the register blocks of several vectors, single vectors and the
// column tail, with row strides wider than the rows. Bound: (K + 1) u (|C0| + sum_k |A| |B|) per
// element, doubled.
TEST(FastMathTest, MatMulAccMatchesFloat64AtEverySimdTarget) {
  for (const SimdTarget& target : SimdTargets()) {
    ScopedSimdTarget scope(target);
    SCOPED_TRACE(target.name);
    for (int64_t M : {1, 3, 4, 5, 9}) {
      for (int64_t N : {1, 7, 8, 13, 16, 33, 64, 71}) {
        for (int64_t K : {1, 3, 24, 65}) {
          SCOPED_TRACE(::testing::Message() << "M " << M << " N " << N << " K " << K);
          const int64_t lda = K + 3, ldb = N + 5, ldc = N + 2;
          const std::vector<float> a = Uniform(M * lda, -1.0f, 1.0f, 1 + M);
          const std::vector<float> b = Uniform(K * ldb, -1.0f, 1.0f, 2 + N);
          std::vector<float> c = Uniform(M * ldc, -2.0f, 2.0f, 3 + K);
          const std::vector<float> c0 = c;
          MatMulAcc(a.data(), lda, b.data(), ldb, c.data(), ldc, M, K, N);
          for (int64_t r = 0; r < M; ++r) {
            for (int64_t j = 0; j < ldc; ++j) {
              if (j >= N) {  // Padding between rows is untouched.
                ASSERT_EQ(c[r * ldc + j], c0[r * ldc + j]);
                continue;
              }
              double want = c0[r * ldc + j], mag = std::fabs(want);
              for (int64_t k = 0; k < K; ++k) {
                const double p = static_cast<double>(a[r * lda + k]) * b[k * ldb + j];
                want += p;
                mag += std::fabs(p);
              }
              ASSERT_NEAR(c[r * ldc + j], want, 2 * (K + 1) * kU * mag) << r << ", " << j;
            }
          }
        }
      }
    }
  }
}

// The fused attention kernels compute a tile's scores for rows [r0, rows) with r0 varying, and
// rely on every row's result being the same bits whatever its block: row r of an M-row product
// equals the same row computed alone (a 1-row block) and within a product that starts at row 1.
// Columns likewise: column j of the product equals column 0 of the product over columns [j, N)
// (a column of the tail moves into a vector and back), at every SIMD target.
TEST(FastMathTest, MatMulAccRowsAndColumnsDoNotDependOnTheBlocking) {
  const int64_t M = 7, K = 37, N = 71;
  const std::vector<float> a = Uniform(M * K, -1.0f, 1.0f, 5);
  const std::vector<float> b = Uniform(K * N, -1.0f, 1.0f, 6);
  for (const SimdTarget& target : SimdTargets()) {
    ScopedSimdTarget scope(target);
    SCOPED_TRACE(target.name);
    std::vector<float> all(M * N, 0.0f), shifted(M * N, 0.0f);
    MatMulAcc(a.data(), K, b.data(), N, all.data(), N, M, K, N);
    MatMulAcc(a.data() + K, K, b.data(), N, shifted.data() + N, N, M - 1, K, N);
    for (int64_t r = 0; r < M; ++r) {
      std::vector<float> alone(N, 0.0f);
      MatMulAcc(a.data() + r * K, K, b.data(), N, alone.data(), N, 1, K, N);
      for (int64_t j = 0; j < N; ++j) {
        ASSERT_EQ(all[r * N + j], alone[j]) << r << ", " << j;
        if (r > 0) {
          ASSERT_EQ(shifted[r * N + j], alone[j]) << r << ", " << j;
        }
      }
    }
    for (int64_t j = 0; j < N; ++j) {
      std::vector<float> right(M * N, 0.0f);
      MatMulAcc(a.data(), K, b.data() + j, N, right.data(), N, M, K, N - j);
      for (int64_t r = 0; r < M; ++r) ASSERT_EQ(right[r * N], all[r * N + j]) << r << ", " << j;
    }
  }
}

// A row of scores scaled and masked at every SIMD target, against the scalar definition to the
// bit (one product per kept element): with and without a padding mask, the causal limit n_vis
// before, inside (at every offset around the vector widths) and past the row.
TEST(FastMathTest, ScaleAndMaskKeepsTheVisibleUnmaskedScoresAtEverySimdTarget) {
  const float scale = 0.125f + 0x1p-20f;  // Products that round.
  for (const SimdTarget& target : SimdTargets()) {
    ScopedSimdTarget scope(target);
    SCOPED_TRACE(target.name);
    for (int64_t n : {1, 3, 4, 7, 8, 15, 16, 17, 33, 64}) {
      const std::vector<float> x = Uniform(n, -50.0f, 50.0f, static_cast<uint32_t>(n));
      std::vector<int32_t> mask(n);
      for (int64_t j = 0; j < n; ++j) mask[j] = (j * 7 + 3) % 5 != 0 ? 1 : 0;
      for (int64_t n_vis = -1; n_vis <= n + 1; ++n_vis) {
        for (const int32_t* m :
             {static_cast<const int32_t*>(nullptr), std::as_const(mask).data()}) {
          std::vector<float> y = x;
          ScaleAndMask(y.data(), scale, n_vis, m, n, -kInf);
          for (int64_t j = 0; j < n; ++j) {
            const bool kept = j < n_vis && (m == nullptr || m[j] != 0);
            ASSERT_EQ(y[j], kept ? scale * x[j] : -kInf)
                << "n " << n << " n_vis " << n_vis << " j " << j << (m ? " masked" : "");
          }
        }
      }
    }
  }
}

// ScaleF32 and MulF32 at every SIMD target against the scalar products, tails included.
TEST(FastMathTest, ScaleAndMultiplyAreTheScalarProductsAtEverySimdTarget) {
  for (const SimdTarget& target : SimdTargets()) {
    ScopedSimdTarget scope(target);
    SCOPED_TRACE(target.name);
    for (int64_t n : {0, 1, 5, 8, 16, 19, 64, 100}) {
      const std::vector<float> x = Uniform(n, -3.0f, 3.0f, 7);
      const std::vector<float> f = Uniform(n, 0.0f, 2.0f, 8);
      std::vector<float> scaled = x, product = x;
      ScaleF32(scaled.data(), 1.1f, n);
      MulF32(product.data(), f.data(), n);
      for (int64_t j = 0; j < n; ++j) {
        ASSERT_EQ(scaled[j], 1.1f * x[j]) << n << " " << j;
        ASSERT_EQ(product[j], x[j] * f[j]) << n << " " << j;
      }
    }
  }
}

// The score gradients ds = (scale p)(dp f - d) within a few f32 roundings of float64, with and
// without dropout factors (0 or 1 / keep, as dropout gives), pd becoming p f; the same bits at
// every SIMD target.
TEST(FastMathTest, ScoreGradsMatchFloat64AndAgreeAcrossSimdTargets) {
  const float scale = 0.125f, d_i = 0.37f, keep_scale = 1.0f / 0.9f;
  for (int64_t n : {1, 6, 8, 16, 21, 64}) {
    const std::vector<float> p = Uniform(n, 0.0f, 1.0f, 11);
    const std::vector<float> dp = Uniform(n, -2.0f, 2.0f, 12);
    std::vector<float> factor(n);
    for (int64_t j = 0; j < n; ++j) factor[j] = j % 3 == 1 ? 0.0f : keep_scale;
    std::vector<std::vector<float>> first;  // pd, ds without and with factors at the best target.
    for (const SimdTarget& target : SimdTargets()) {
      ScopedSimdTarget scope(target);
      SCOPED_TRACE(target.name);
      std::vector<std::vector<float>> got;
      for (const float* f : {static_cast<const float*>(nullptr), std::as_const(factor).data()}) {
        std::vector<float> pd = p, ds(n, -1.0f);
        ScoreGrads(pd.data(), dp.data(), f, scale, d_i, n, ds.data());
        for (int64_t j = 0; j < n; ++j) {
          const double fj = f == nullptr ? 1.0 : f[j];
          const double want = double{scale} * p[j] * (double{dp[j]} * fj - d_i);
          const double mag = double{scale} * p[j] * (std::fabs(double{dp[j]} * fj) + d_i);
          EXPECT_NEAR(ds[j], want, 4 * kU * mag + 1e-30) << n << " " << j;
          EXPECT_EQ(pd[j], f == nullptr ? p[j] : p[j] * f[j]) << n << " " << j;
        }
        got.push_back(pd);
        got.push_back(ds);
      }
      if (first.empty()) {
        first = got;
      } else {
        for (size_t k = 0; k < got.size(); ++k) EXPECT_EQ(got[k], first[k]) << n << " " << k;
      }
    }
  }
}

}  // namespace
}  // namespace ops
}  // namespace mt
