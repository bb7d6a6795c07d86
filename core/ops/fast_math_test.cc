#include "core/ops/fast_math.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using internal::ExpNonPositive;
using internal::ExpNonPositiveV8;
using internal::ExpTerms;
using internal::LoadV8;
using internal::MatMulAcc;
using internal::SplatV8;
using internal::StoreV8;
using internal::V8;

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

TEST(FastMathTest, V8LoadStoreSplatMoveEightLanes) {
  float in[9], out[9];
  for (int i = 0; i < 9; ++i) in[i] = 0.5f * static_cast<float>(i) - 1.75f;
  for (float& x : out) x = NAN;
  // Unaligned on purpose: the helpers must not assume 32-byte alignment.
  StoreV8(out + 1, LoadV8(in + 1) + SplatV8(2.0f));
  EXPECT_TRUE(std::isnan(out[0]));
  for (int i = 1; i < 9; ++i) EXPECT_EQ(out[i], in[i] + 2.0f) << i;
}

// Each lane of ExpNonPositiveV8 within the scalar version's bound of exp in float64, and its
// edge values: exactly 1 at 0, exactly 0 at and below -87.3 (and for -inf).
TEST(FastMathTest, ExpNonPositiveV8MatchesFloat64) {
  constexpr int kN = 2000000;
  double worst = 0;
  float x[8], y[8];
  for (int i = 0; i < kN; i += 8) {
    for (int l = 0; l < 8; ++l) x[l] = -87.0f * static_cast<float>(i + l) / kN;
    StoreV8(y, ExpNonPositiveV8(LoadV8(x)));
    for (int l = 0; l < 8; ++l) {
      const double want = std::exp(static_cast<double>(x[l]));
      worst = std::max(worst, std::fabs(y[l] - want) / want);
    }
  }
  EXPECT_LT(worst, 3e-7) << worst;
  const float edges[8] = {0.0f, -0.0f, -87.3f, -87.31f, -200.0f, -kInf, -1e-30f, -87.0f};
  StoreV8(y, ExpNonPositiveV8(LoadV8(edges)));
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 1.0f);
  for (int l = 2; l < 6; ++l) EXPECT_EQ(y[l], 0.0f) << edges[l];
  EXPECT_EQ(y[6], 1.0f);
  EXPECT_NEAR(y[7], std::exp(-87.0), 3e-7 * std::exp(-87.0));
}

// ExpTerms over lengths that exercise the eight-lane body, the scalar tail and both together,
// against float64: exp(min(a x - b, 0)). The argument a x - b is rounded in f32 (possibly fused),
// which adds at most 2u |a x| + u |b| (absolute) to it, i.e. that much relative error to the exp.
TEST(FastMathTest, ExpTermsMatchesFloat64WithTails) {
  for (int64_t n : {0, 1, 5, 7, 8, 9, 15, 16, 17, 63, 64, 65, 131}) {
    SCOPED_TRACE(n);
    std::vector<float> x = Uniform(n, -12.0f, 4.0f, 10 + n);
    if (n > 3) x[3] = -kInf;  // A masked score.
    const float a = 0.7f, b = 1.25f;
    std::vector<float> y(n + 1, NAN);
    ExpTerms(x.data(), a, b, n, y.data());
    EXPECT_TRUE(std::isnan(y[n])) << "wrote past n";
    for (int64_t j = 0; j < n; ++j) {
      if (std::isinf(x[j])) {
        EXPECT_EQ(y[j], 0.0f) << j;
        continue;
      }
      const double t = static_cast<double>(a) * x[j] - b;
      const double want = std::exp(std::min(t, 0.0));
      const double tol = want * (3e-7 + 2 * kU * std::fabs(a * x[j]) + kU * b);
      EXPECT_NEAR(y[j], want, tol) << j << ": x " << x[j];
    }
    // In place (y = x) gives the same bits.
    std::vector<float> z = x;
    ExpTerms(z.data(), a, b, n, z.data());
    for (int64_t j = 0; j < n; ++j) EXPECT_EQ(z[j], y[j]) << j;
  }
}

// MatMulAcc accumulates A B into C: against float64 over shapes that hit the 4-row and 1-row
// blocks, the 16/32-column register blocks, the 8-column remainder and the scalar tail, with row
// strides wider than the rows. Bound: (K + 1) u (|C0| + sum_k |A| |B|) per element, doubled.
TEST(FastMathTest, MatMulAccMatchesFloat64) {
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

// The fused attention kernels compute a tile's scores for rows [r0, rows) with r0 varying, and
// rely on every row's result being the same bits whatever its block: row r of an M-row product
// equals the same row computed alone (a 1-row block) and within a product that starts at row 1.
TEST(FastMathTest, MatMulAccRowsDoNotDependOnTheBlocking) {
  const int64_t M = 7, K = 37, N = 71;
  const std::vector<float> a = Uniform(M * K, -1.0f, 1.0f, 5);
  const std::vector<float> b = Uniform(K * N, -1.0f, 1.0f, 6);
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
}

}  // namespace
}  // namespace ops
}  // namespace mt
