// ops::Gemm and ops::BatchedGemm on the CPU against a float64 reference: every (M, K, N) of odd
// sizes, all transposes, alpha/beta, every dtype (and 16-bit inputs with an f32 C) and backend,
// thread counts and batches; hand-computed products; and the argument errors. The fused epilogues
// are in gemm_epilogue_test.cc.
#include "core/ops/gemm.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cpu_features.h"
#include "core/cpu_features_testutil.h"
#include "core/onednn.h"
#include "core/ops/gemm_testutil.h"
#include "core/ops/testutil.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::FromDoubles;
using ::mt::testing::GemmCase;
using ::mt::testing::GemmParam;
using ::mt::testing::GemmReference;
using ::mt::testing::IsError;
using ::mt::testing::RandomTensor;
using ::mt::testing::SizeCube;
using ::mt::testing::ToDoubles;
using ::mt::testing::TransposeSweep;
using ::mt::testing::UnitRoundoff;
using ::mt::testing::WriteDoubles;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// f32 accumulation over K terms (c sqrt(K) u_f32, the statistical bound for rounding errors of
// random sign) plus one rounding of the result to the output dtype, relative to the magnitude.
// f16 results can be subnormal, where the rounding error is absolute: up to half of 2^-24.
::testing::AssertionResult WithinBound(const std::vector<double>& actual, const GemmReference& ref,
                                       int64_t k, DType dtype) {
  const double rel = UnitRoundoff(dtype) +
                     4.0 * std::sqrt(static_cast<double>(k) + 2.0) * UnitRoundoff(DType::kF32);
  const double abs = dtype == DType::kF16 ? std::ldexp(1.0, -25) : 0.0;
  std::vector<double> bound(ref.magnitude.size());
  for (size_t i = 0; i < bound.size(); ++i) bound[i] = rel * ref.magnitude[i] + abs;
  return ::mt::testing::WithinBounds(actual, ref.value, bound);
}

// Random A (a_dtype), B (b_dtype) and C; C is NaN when beta = 0 (it must not be read). Runs the
// op and checks it.
void RunCaseWith(const GemmCase& cs, DType a_dtype, DType b_dtype) {
  Tensor a = RandomTensor(cs.AShape(), a_dtype, 3 * cs.seed + 1);
  Tensor b = RandomTensor(cs.BShape(), b_dtype, 3 * cs.seed + 2);
  Tensor c = RandomTensor(cs.CShape(), cs.c_dtype, 3 * cs.seed + 3);
  if (cs.beta == 0.0f) WriteDoubles(std::vector<double>(c.numel(), kNaN), c.view());
  const GemmReference ref = ::mt::testing::ReferenceGemm(cs, ToDoubles(a.view()),
                                                         ToDoubles(b.view()), ToDoubles(c.view()));
  ExecContext ctx;
  ctx.pool = cs.pool;
  const absl::Status status = cs.batch == 0
                                  ? Gemm(ctx, a.view(), b.view(), c.view(), cs.Options())
                                  : BatchedGemm(ctx, a.view(), b.view(), c.view(), cs.Options());
  ASSERT_TRUE(status.ok()) << status;
  // The only rounding beyond f32 accumulation is the one to C's dtype.
  EXPECT_TRUE(WithinBound(ToDoubles(c.view()), ref, cs.k, cs.c_dtype));
}

// A and B in cs.dtype.
void RunCase(const GemmCase& cs) {
  SCOPED_TRACE(cs.ToString());
  RunCaseWith(cs, cs.dtype, cs.dtype);
}

// Mixed operands: A (f32_a) or B f32, the other in cs.dtype.
void RunMixedCase(const GemmCase& cs, bool f32_a) {
  SCOPED_TRACE(absl::StrCat(cs.ToString(), f32_a ? ", A f32" : ", B f32"));
  RunCaseWith(cs, f32_a ? DType::kF32 : cs.dtype, f32_a ? cs.dtype : DType::kF32);
}

// Runs the cases in order; stops at the first failure.
void RunCases(const std::vector<GemmCase>& cases) {
  for (const GemmCase& cs : cases) {
    RunCase(cs);
    if (::testing::Test::HasFailure()) return;
  }
}

// Gemm on the calling thread.
absl::Status GemmOf(const Tensor& a, const Tensor& b, const Tensor& c,
                    const GemmOptions& options = {}) {
  return Gemm(ExecContext{}, a.view(), b.view(), c.view(), options);
}

const std::vector<int64_t> kOddSizes = {1, 3, 17, 65, 130};

// Parameterised by (dtype of A and B, CPU backend).
class GemmParamTest : public ::testing::TestWithParam<GemmParam> {
 protected:
  void SetUp() override {
    if (!::mt::testing::BackendRunsHere(std::get<1>(GetParam()))) {
      GTEST_SKIP() << "the packed GEMM needs AVX2 and FMA";
    }
  }

  // A case in the parameter's dtype and backend, with C of c_dtype.
  GemmCase Base(DType c_dtype) const {
    GemmCase cs;
    cs.dtype = std::get<0>(GetParam());
    cs.c_dtype = c_dtype;
    cs.backend = std::get<1>(GetParam());
    return cs;
  }
};

// A, B and C of one dtype.
class GemmDTypeBackendTest : public GemmParamTest {
 protected:
  GemmCase Base() const { return GemmParamTest::Base(std::get<0>(GetParam())); }
};

// Every (M, K, N) in {1, 3, 17, 65, 130}^3, all four transpose combinations, alpha/beta cycling.
TEST_P(GemmDTypeBackendTest, MatchesFloat64ReferenceOnOddSizes) {
  RunCases(TransposeSweep(Base(), SizeCube(kOddSizes), {nullptr}, 0));
}

// Sizes at which both backends split the work over threads; a null pool and two threads must
// both agree with the reference.
TEST_P(GemmDTypeBackendTest, ThreadCountDoesNotChangeTheResult) {
  ThreadPool pool(2);
  RunCases(TransposeSweep(Base(), {{0, 129, 257, 190}, {0, 300, 65, 515}}, {nullptr, &pool}, 1000));
}

TEST_P(GemmDTypeBackendTest, BatchedMatchesFloat64Reference) {
  ThreadPool pool(2);
  RunCases(TransposeSweep(Base(),
                          {{1, 3, 17, 65}, {3, 65, 17, 130}, {4, 17, 1, 3}, {2, 130, 129, 33}},
                          {nullptr, &pool}, 2000));
}

// Shapes past one widened piece (4 Mi f32 elements of op(A) and op(B) together), one for each
// dimension the 16-bit operands are split along on OpenBLAS and Eigen: N, M, then K (gemm_cpu.h).
const std::vector<std::array<int64_t, 4>> kPiecewiseShapes = {
    {0, 33, 8300, 127}, {0, 8300, 33, 127}, {0, 20, 36, 19000}};

// One 16-bit dtype per backend and suite (they share the widening code): bf16 on OpenBLAS and f16
// on Eigen with a 16-bit C, the other way round with an f32 C.
bool WidensPiecewise(const GemmParam& param, bool f32_c) {
  const auto [dtype, backend] = param;
  const DType on_openblas = f32_c ? DType::kF16 : DType::kBF16;
  const DType on_eigen = f32_c ? DType::kBF16 : DType::kF16;
  return (backend == CpuGemmBackend::kOpenBlas && dtype == on_openblas) ||
         (backend == CpuGemmBackend::kEigen && dtype == on_eigen);
}

TEST_P(GemmDTypeBackendTest, LargeHalfProductsWidenedPieceByPiece) {
  if (!WidensPiecewise(GetParam(), false)) GTEST_SKIP() << "covered by another dtype or backend";
  ThreadPool pool(2);
  RunCases(TransposeSweep(Base(), kPiecewiseShapes, {&pool}, 5000));
}

TEST_P(GemmDTypeBackendTest, HandComputedProduct) {
  // [[1, 2, 3], [4, 5, 6]] x [[7, 8], [9, 10], [11, 12]] = [[58, 64], [139, 154]]; then
  // alpha = 2, beta = -1 over C = [[1, 2], [3, 4]]. Exact in f32; one rounding to the dtype (bf16
  // holds 275 as 276).
  const auto [dtype, backend] = GetParam();
  Tensor a = FromDoubles({2, 3}, dtype, {1, 2, 3, 4, 5, 6});
  Tensor b = FromDoubles({3, 2}, dtype, {7, 8, 9, 10, 11, 12});
  Tensor c = FromDoubles({2, 2}, dtype, {1, 2, 3, 4});
  GemmOptions options;
  options.cpu_backend = backend;
  options.alpha = 2.0f;
  options.beta = -1.0f;
  ASSERT_TRUE(GemmOf(a, b, c, options).ok());
  EXPECT_EQ(ToDoubles(c.view()),
            ToDoubles(FromDoubles({2, 2}, dtype, {115, 126, 275, 304}).view()));

  // The same product from transposed storage: A^T stored as [3, 2], B^T as [2, 3].
  Tensor at = FromDoubles({3, 2}, dtype, {1, 4, 2, 5, 3, 6});
  Tensor bt = FromDoubles({2, 3}, dtype, {7, 9, 11, 8, 10, 12});
  options = GemmOptions{};
  options.cpu_backend = backend;
  options.transpose_a = Transpose::kYes;
  options.transpose_b = Transpose::kYes;
  ASSERT_TRUE(GemmOf(at, bt, c, options).ok());
  EXPECT_EQ(ToDoubles(c.view()), (std::vector<double>{58, 64, 139, 154}));
}

TEST_P(GemmDTypeBackendTest, EmptyInnerDimensionAndZeroAlphaScaleC) {
  const auto [dtype, backend] = GetParam();
  GemmOptions options;
  options.cpu_backend = backend;
  options.beta = 0.5f;
  // K = 0: C = beta * C.
  Tensor a = Tensor::Host({2, 0}, dtype);
  Tensor b = Tensor::Host({0, 3}, dtype);
  Tensor c = FromDoubles({2, 3}, dtype, {1, -2, 3, -4, 5, -6});
  ASSERT_TRUE(GemmOf(a, b, c, options).ok());
  EXPECT_EQ(ToDoubles(c.view()), (std::vector<double>{0.5, -1, 1.5, -2, 2.5, -3}));
  // alpha = 0: A and B are not read, so their NaNs do not reach C.
  Tensor an = FromDoubles({2, 1}, dtype, {kNaN, kNaN});
  Tensor bn = FromDoubles({1, 3}, dtype, {kNaN, 1, 2});
  options.alpha = 0.0f;
  ASSERT_TRUE(GemmOf(an, bn, c, options).ok());
  EXPECT_EQ(ToDoubles(c.view()), (std::vector<double>{0.25, -0.5, 0.75, -1, 1.25, -1.5}));
  // beta = 0 with K = 0 overwrites a NaN C with zeros.
  options.beta = 0.0f;
  WriteDoubles(std::vector<double>(6, kNaN), c.view());
  ASSERT_TRUE(GemmOf(a, b, c, options).ok());
  EXPECT_EQ(ToDoubles(c.view()), std::vector<double>(6, 0.0));
  // M = 0: nothing to do.
  Tensor a0 = Tensor::Host({0, 4}, dtype);
  Tensor b0 = FromDoubles({4, 1}, dtype, {1, 2, 3, 4});
  Tensor c0 = Tensor::Host({0, 1}, dtype);
  EXPECT_TRUE(GemmOf(a0, b0, c0, options).ok());
}

// Mixed precision: bf16/f16 A and B with an f32 C (weight gradients accumulated into f32 main
// grads). The result carries only f32 accumulation error: no rounding to 16 bits.
class GemmMixedPrecisionTest : public GemmParamTest {
 protected:
  GemmCase Base() const { return GemmParamTest::Base(DType::kF32); }
};

TEST_P(GemmMixedPrecisionTest, F32OutputMatchesFloat64ReferenceOnOddSizes) {
  ThreadPool pool(3);
  std::vector<GemmCase> cases = TransposeSweep(Base(), SizeCube(kOddSizes), {nullptr}, 3000);
  for (size_t i = 0; i < cases.size(); ++i) cases[i].pool = i % 2 == 0 ? nullptr : &pool;
  RunCases(cases);
}

TEST_P(GemmMixedPrecisionTest, BatchedF32OutputMatchesFloat64Reference) {
  RunCases(
      TransposeSweep(Base(), {{1, 3, 17, 65}, {3, 65, 17, 130}, {4, 17, 1, 3}}, {nullptr}, 4000));
}

TEST_P(GemmMixedPrecisionTest, LargeProductsWidenedPieceByPieceIntoF32) {
  if (!WidensPiecewise(GetParam(), true)) GTEST_SKIP() << "covered by another dtype or backend";
  ThreadPool pool(2);
  RunCases(TransposeSweep(Base(), kPiecewiseShapes, {&pool}, 6000));
}

TEST_P(GemmMixedPrecisionTest, AccumulatesIntoF32WithoutRounding) {
  // A = [[1, 2^-7]], B = [[1 + 2^-7], [2^-7]] in bf16 (exact), C = [[2^-12]] f32, beta = 1:
  // C = 2^-12 + (1 + 2^-7) + 2^-14, exact in f32 but not representable in bf16 (or f16's 11 bits).
  const auto [dtype, backend] = GetParam();
  const double e7 = std::ldexp(1.0, -7);
  Tensor a = FromDoubles({1, 2}, dtype, {1, e7});
  Tensor b = FromDoubles({2, 1}, dtype, {1 + e7, e7});
  Tensor c = FromDoubles({1, 1}, DType::kF32, {std::ldexp(1.0, -12)});
  GemmOptions options;
  options.cpu_backend = backend;
  options.beta = 1.0f;
  ASSERT_TRUE(GemmOf(a, b, c, options).ok());
  const double expected = std::ldexp(1.0, -12) + 1 + e7 + std::ldexp(1.0, -14);
  EXPECT_EQ(ToDoubles(c.view())[0], expected);
  // A second accumulation adds the product again.
  ASSERT_TRUE(GemmOf(a, b, c, options).ok());
  EXPECT_EQ(ToDoubles(c.view())[0], expected + 1 + e7 + std::ldexp(1.0, -14));
}

// Mixed operands (gemm.h): an f32 A or B beside a 16-bit one, on every backend a caller can ask
// for (they run on OpenBLAS, or Eigen), in Gemm and BatchedGemm. The f32 operand is read as it
// is: with an f32 C the bound leaves no room for rounding it to 16 bits. The last shape splits K
// into widened pieces of the 16-bit operand beside views of the f32 one.
class GemmMixedOperandsTest : public GemmParamTest {};

TEST_P(GemmMixedOperandsTest, MatchFloat64Reference) {
  ThreadPool pool(2);
  uint64_t seed = 7000;
  for (const bool f32_a : {true, false}) {
    for (const DType c_dtype : {DType::kF32, std::get<0>(GetParam())}) {
      for (const GemmCase& cs : TransposeSweep(
               Base(c_dtype), {{0, 3, 17, 65}, {0, 65, 130, 17}, {0, 1, 3, 1}, {3, 17, 5, 33}},
               {nullptr, &pool}, seed)) {
        RunMixedCase(cs, f32_a);
      }
      seed += 100;
      if (::testing::Test::HasFailure()) return;
    }
  }
  for (const bool f32_a : {true, false}) {
    for (GemmCase cs : TransposeSweep(Base(DType::kF32), {{0, 8, 8, 140000}}, {&pool}, seed)) {
      RunMixedCase(cs, f32_a);
    }
    seed += 100;
  }
}

// A 16-bit bias and GeLU after a mixed product, into a 16-bit C: within the bound of the rounded
// result of the float64 reference.
TEST_P(GemmMixedOperandsTest, BiasAndGeluEpilogue) {
  const DType dtype = std::get<0>(GetParam());
  Tensor a = FromDoubles({2, 3}, dtype, {1, 2, 3, 4, 5, 6});
  Tensor b = FromDoubles({3, 2}, DType::kF32, {0.5, -0.25, 0.125, 1, -1, 0.75});
  Tensor bias = FromDoubles({2}, dtype, {0.5, -2});
  Tensor c = Tensor::Host({2, 2}, dtype);
  GemmOptions options;
  options.cpu_backend = std::get<1>(GetParam());
  options.bias = &bias.view();
  options.epilogue = Epilogue::kGelu;
  const absl::Status status = GemmOf(a, b, c, options);
  ASSERT_TRUE(status.ok()) << status;
  // Products: [[-2.25, 4], [-3.375, 8.5]]; plus the bias: [[-1.75, 2], [-2.875, 6.5]].
  const double v[] = {-1.75, 2, -2.875, 6.5};
  const std::vector<double> got = ToDoubles(c.view());
  for (int i = 0; i < 4; ++i) {
    const double gelu =
        0.5 * v[i] * (1 + std::tanh(std::sqrt(2 / M_PI) * (v[i] + 0.044715 * v[i] * v[i] * v[i])));
    EXPECT_NEAR(got[i], gelu, 2 * UnitRoundoff(dtype) * std::abs(gelu) + 1e-5) << i;
  }
}

TEST(GemmTest, MixedOperandsNeedOne16BitAndOneF32) {
  Tensor a = RandomTensor({2, 3}, DType::kBF16, 1);
  Tensor b16 = RandomTensor({3, 4}, DType::kF16, 2);
  Tensor c = RandomTensor({2, 4}, DType::kF32, 3);
  EXPECT_TRUE(
      IsError(GemmOf(a, b16, c), absl::StatusCode::kInvalidArgument,
              "Gemm: A and B must share one dtype (on the CPU one of them may be f32 beside "
              "a 16-bit one) and C must have the 16-bit one or be f32, got A bf16, B f16, "
              "C f32"));
  Tensor b32 = RandomTensor({3, 4}, DType::kF32, 4);
  Tensor c16 = RandomTensor({2, 4}, DType::kF16, 5);
  EXPECT_TRUE(IsError(GemmOf(a, b32, c16), absl::StatusCode::kInvalidArgument,
                      "C must have the 16-bit one or be f32, got A bf16, B f32, C f16"));
  Tensor bias = RandomTensor({4}, DType::kF16, 6);
  GemmOptions options;
  options.bias = &bias.view();
  EXPECT_TRUE(
      IsError(GemmOf(a, b32, c, options), absl::StatusCode::kInvalidArgument,
              "Gemm: bias has dtype f16, expected bf16 (the dtype of the operands) or f32"));
}

INSTANTIATE_TEST_SUITE_P(HalfWithF32, GemmMixedOperandsTest, ::mt::testing::HalfGemmParams(),
                         ::mt::testing::GemmParamName);
INSTANTIATE_TEST_SUITE_P(AllDTypesAndBackends, GemmDTypeBackendTest, ::mt::testing::AllGemmParams(),
                         ::mt::testing::GemmParamName);
INSTANTIATE_TEST_SUITE_P(HalfInputsF32Output, GemmMixedPrecisionTest,
                         ::mt::testing::HalfGemmParams(), ::mt::testing::GemmParamName);

// ExecContext::row_invariant_gemm (core/ops/gemm_rows_simd.h): within the f32 bound of the float64
// reference, on one thread or two, and every row of an M-row product is bitwise that row's product
// computed alone (as a batched decoding step needs; the BLAS's blocking by rows breaks that).
TEST(GemmTest, RowInvariantKernelMatchesReferenceAndEveryRowAlone) {
  ThreadPool two(2);
  uint64_t seed = 100;
  for (const int64_t m : {1, 5, 13}) {
    for (const int64_t k : {1, 17, 130}) {
      for (const int64_t n : {3, 40, 65}) {
        for (const Transpose tb : {Transpose::kNo, Transpose::kYes}) {
          GemmCase cs;
          cs.m = m;
          cs.n = n;
          cs.k = k;
          cs.tb = tb;
          cs.alpha = seed % 2 == 0 ? 1.0f : 0.5f;
          cs.beta = seed % 3 == 0 ? 1.5f : 0.0f;
          cs.seed = ++seed;
          SCOPED_TRACE(cs.ToString());
          Tensor a = RandomTensor(cs.AShape(), DType::kF32, 3 * cs.seed + 1);
          Tensor b = RandomTensor(cs.BShape(), DType::kF32, 3 * cs.seed + 2);
          Tensor c0 = RandomTensor(cs.CShape(), DType::kF32, 3 * cs.seed + 3);
          const GemmReference ref = ::mt::testing::ReferenceGemm(
              cs, ToDoubles(a.view()), ToDoubles(b.view()), ToDoubles(c0.view()));
          ExecContext ctx;
          ctx.row_invariant_gemm = true;
          ctx.pool = seed % 2 == 0 ? &two : nullptr;
          Tensor c = RandomTensor(cs.CShape(), DType::kF32, 3 * cs.seed + 3);
          ASSERT_TRUE(Gemm(ctx, a.view(), b.view(), c.view(), cs.Options()).ok());
          EXPECT_TRUE(WithinBound(ToDoubles(c.view()), ref, k, DType::kF32));
          for (int64_t r = 0; r < m; ++r) {
            const TensorView row_a(a.data_as<float>() + r * k, {1, k}, DType::kF32);
            Tensor row_c = Tensor::Host({1, n}, DType::kF32);
            std::copy_n(c0.data_as<float>() + r * n, n, row_c.data_as<float>());
            ASSERT_TRUE(Gemm(ctx, row_a, b.view(), row_c.view(), cs.Options()).ok());
            EXPECT_EQ(std::memcmp(row_c.data(), c.data_as<float>() + r * n, n * sizeof(float)), 0)
                << "row " << r << " of " << m << " differs from the row alone";
          }
        }
      }
    }
  }
}

TEST(GemmTest, BackendNames) {
  EXPECT_STREQ(CpuGemmBackendName(CpuGemmBackend::kEigen), "eigen");
  EXPECT_STREQ(CpuGemmBackendName(CpuGemmBackend::kOpenBlas), "openblas");
  EXPECT_STREQ(CpuGemmBackendName(CpuGemmBackend::kOneDnn), "onednn");
  EXPECT_STREQ(CpuGemmBackendName(CpuGemmBackend::kPacked), "packed");
  // The measured winner for f32 (docs/perf/gemm.md).
  EXPECT_STREQ(CpuGemmBackendName(CpuGemmBackend::kDefault), "openblas");
}

// The fixed rule behind kDefault: bf16 goes to oneDNN only where the CPU multiplies bf16.
TEST(GemmTest, DefaultBackendRule) {
  CpuFeatures f = ::mt::testing::Avx512CpuFeatures();
  for (DType t : {DType::kF32, DType::kF16}) {
    EXPECT_EQ(DefaultCpuGemmBackend(t, f), CpuGemmBackend::kOpenBlas) << DTypeName(t);
  }
  // Without bf16 instructions bf16 is widened, by the packed GEMM (gemm_packed_test).
  EXPECT_EQ(DefaultCpuGemmBackend(DType::kBF16, f), CpuGemmBackend::kPacked);
  f.avx512_bf16 = true;
  EXPECT_EQ(DefaultCpuGemmBackend(DType::kBF16, f), CpuGemmBackend::kOneDnn);
  EXPECT_EQ(DefaultCpuGemmBackend(DType::kF32, f), CpuGemmBackend::kOpenBlas);
  EXPECT_EQ(DefaultCpuGemmBackend(DType::kF16, f), CpuGemmBackend::kOpenBlas);
  f = ::mt::testing::Avx512CpuFeatures();
  f.amx_tile = f.amx_bf16 = f.os_amx = true;
  EXPECT_EQ(DefaultCpuGemmBackend(DType::kBF16, f), CpuGemmBackend::kOneDnn);
  f.os_zmm =
      false;  // The OS has not enabled AVX-512: neither counts (AVX2 only: gemm_packed_test).
  EXPECT_NE(DefaultCpuGemmBackend(DType::kBF16, f), CpuGemmBackend::kOneDnn);
  // This CPU's line names a route for every dtype.
  const std::string line = DescribeCpuGemm();
  EXPECT_NE(line.find("f32: "), std::string::npos) << line;
  EXPECT_NE(line.find("; bf16: "), std::string::npos) << line;
  EXPECT_NE(line.find("; f16: "), std::string::npos) << line;
}

// kDefault's bf16 route in this process: oneDNN where the rule says so and oneDNN has a bf16 kernel
// (not under ONEDNN_MAX_CPU_ISA=AVX2, as in the gemm_onednn_avx2_test variant), else widened by the
// packed GEMM (or by OpenBLAS on a CPU without AVX2 and FMA).
TEST(GemmTest, DefaultBf16RouteNeedsAOneDnnBf16Kernel) {
  const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
  const bool capped_below_bf16 = cap != nullptr && std::string(cap) == "AVX2";
  const bool rule_says_onednn =
      DefaultCpuGemmBackend(DType::kBF16, DetectCpuFeatures()) == CpuGemmBackend::kOneDnn;
  const bool onednn = rule_says_onednn && LoadOneDnn().status.ok() && !capped_below_bf16;
  const CpuGemmBackend route = ResolveCpuGemmBackend(CpuGemmBackend::kDefault, DType::kBF16);
  EXPECT_EQ(route, onednn                  ? CpuGemmBackend::kOneDnn
                   : PackedGemmAvailable() ? CpuGemmBackend::kPacked
                                           : CpuGemmBackend::kOpenBlas);
  const char* widened = route == CpuGemmBackend::kPacked
                            ? "bf16: packed, widened to f32 while packed ("
                            : "bf16: openblas, widened to f32 (";
  const std::string line = DescribeCpuGemm();
  EXPECT_NE(line.find(onednn ? "bf16: onednn (" : widened), std::string::npos) << line;
  if (rule_says_onednn && LoadOneDnn().status.ok() && capped_below_bf16) {
    EXPECT_NE(line.find(", ISA avx2, capped by ONEDNN_MAX_CPU_ISA)"), std::string::npos) << line;
    EXPECT_NE(line.find(absl::StrCat(widened, "no bf16 kernel in oneDNN ")), std::string::npos)
        << line;
  }
}

TEST(GemmTest, BadShapesAreInvalidArgument) {
  Tensor a = RandomTensor({3, 4}, DType::kF32, 1);
  Tensor b = RandomTensor({5, 6}, DType::kF32, 2);
  Tensor c = RandomTensor({3, 6}, DType::kF32, 3);
  absl::Status s = GemmOf(a, b, c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "Gemm: A is f32[3, 4] and B is f32[5, 6]: inner dimensions 4 and 5 differ");

  GemmOptions transposed;
  transposed.transpose_a = Transpose::kYes;
  s = GemmOf(a, b, c, transposed);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "Gemm: A is f32[3, 4] (transposed) and B is f32[5, 6]: inner dimensions 3 and 5 "
            "differ");

  Tensor b46 = RandomTensor({4, 6}, DType::kF32, 4);
  Tensor c35 = RandomTensor({3, 5}, DType::kF32, 5);
  s = GemmOf(a, b46, c35);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "Gemm: C is f32[3, 5], expected [3, 6] for A f32[3, 4] times B f32[4, 6]");

  Tensor a3 = RandomTensor({2, 3, 4}, DType::kF32, 6);
  s = GemmOf(a3, b46, c);
  EXPECT_TRUE(IsError(s, absl::StatusCode::kInvalidArgument,
                      "Gemm: A has shape [2, 3, 4] (rank 3), expected rank 2"));

  // BatchedGemm: rank 3 and equal batch sizes.
  Tensor b3 = RandomTensor({3, 4, 6}, DType::kF32, 7);
  Tensor c3 = RandomTensor({2, 3, 6}, DType::kF32, 8);
  s = BatchedGemm(ExecContext{}, a3.view(), b3.view(), c3.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "BatchedGemm: batch sizes differ: A is f32[2, 3, 4], B is f32[3, 4, 6], C is "
            "f32[2, 3, 6]");
  s = BatchedGemm(ExecContext{}, a.view(), b46.view(), c.view());
  EXPECT_TRUE(IsError(s, absl::StatusCode::kInvalidArgument,
                      "BatchedGemm: A has shape [3, 4] (rank 2), expected rank 3"));
}

TEST(GemmTest, NonContiguousOverlappingAndMixedInputsAreInvalidArgument) {
  Tensor a = RandomTensor({3, 4}, DType::kF32, 1);
  Tensor b = RandomTensor({4, 6}, DType::kF32, 2);
  Tensor c = RandomTensor({3, 6}, DType::kF32, 3);
  ASSERT_TRUE(GemmOf(a, b, c).ok());

  TensorView strided = b.view();  // Columns 0..2 of each row of B: [4, 3] with row stride 6.
  strided.shape = {4, 3};
  Tensor c33 = RandomTensor({3, 3}, DType::kF32, 4);
  absl::Status s = Gemm(ExecContext{}, a.view(), strided, c33.view());
  EXPECT_TRUE(IsError(s, absl::StatusCode::kInvalidArgument,
                      "Gemm: B (f32[4, 3] on cpu) must be contiguous"));

  Tensor b_bf16 = RandomTensor({4, 6}, DType::kBF16, 5);
  EXPECT_TRUE(GemmOf(a, b_bf16, c).ok());  // Mixed operands (GemmMixedOperandsTest).
  // An f32 C is allowed for 16-bit inputs, a 16-bit C for f32 inputs is not, nor two 16-bit types.
  Tensor a_bf16 = RandomTensor({3, 4}, DType::kBF16, 6);
  Tensor c_bf16 = RandomTensor({3, 6}, DType::kBF16, 7);
  Tensor c_f16 = RandomTensor({3, 6}, DType::kF16, 8);
  EXPECT_TRUE(GemmOf(a_bf16, b_bf16, c).ok());
  s = GemmOf(a, b, c_bf16);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "Gemm: A and B must share one dtype (on the CPU one of them may be f32 beside a 16-bit "
            "one) and C must have the 16-bit one or be f32, got A f32, B f32, C bf16");
  s = GemmOf(a_bf16, b_bf16, c_f16);
  EXPECT_TRUE(IsError(s, absl::StatusCode::kInvalidArgument, "C f16"));

  TensorView on_gpu = c.view();
  on_gpu.device = Device::Cuda(0);
  s = Gemm(ExecContext{}, a.view(), b.view(), on_gpu);
  EXPECT_TRUE(IsError(s, absl::StatusCode::kInvalidArgument, "Gemm: tensors on different devices"));

  // C aliasing an input: [3, 3] products with C on top of A.
  Tensor sq = RandomTensor({3, 3}, DType::kF32, 6);
  Tensor sq2 = RandomTensor({3, 3}, DType::kF32, 7);
  s = Gemm(ExecContext{}, sq.view(), sq2.view(), sq.view());
  EXPECT_TRUE(IsError(s, absl::StatusCode::kInvalidArgument, "Gemm: C overlaps A"));
  s = Gemm(ExecContext{}, sq.view(), sq2.view(), sq2.view());
  EXPECT_NE(s.message().find("Gemm: C overlaps B"), std::string::npos) << s;
}

TEST(GemmTest, UnsupportedDTypesAndDevicesAreUnimplemented) {
  Tensor a = Tensor::Zeros({2, 2}, DType::kI32);
  Tensor b = Tensor::Zeros({2, 2}, DType::kI32);
  Tensor c = Tensor::Zeros({2, 2}, DType::kI32);
  absl::Status s = GemmOf(a, b, c);
  EXPECT_TRUE(IsError(s, absl::StatusCode::kUnimplemented, "Gemm: A has unsupported dtype i32"));

  // CUDA views (never dereferenced): no CUDA kernel yet.
  Tensor x = RandomTensor({2, 2}, DType::kF32, 1);
  Tensor y = RandomTensor({2, 2}, DType::kF32, 2);
  Tensor z = RandomTensor({2, 2}, DType::kF32, 3);
  TensorView xa = x.view(), ya = y.view(), za = z.view();
  xa.device = ya.device = za.device = Device::Cuda(0);
  s = Gemm(ExecContext{}, xa, ya, za);
  EXPECT_TRUE(::mt::testing::RejectsFakeCudaViews(s));
  EXPECT_NE(s.message().find("Gemm: "), std::string::npos) << s;
}

TEST(GemmTest, OpenBlasRejectsDimensionsAbove32Bits) {
  // Views of a [1, 2^31] x [2^31, 1] product at addresses nothing is mapped at (2^44, 2^45; user
  // space starts its heap and stacks far above). Only their metadata is used: the check comes
  // before any data is read, and C does not overlap them.
  const int64_t k = int64_t{1} << 31;
  float c_value = 0;
  TensorView a(reinterpret_cast<void*>(uintptr_t{1} << 44), {1, k}, DType::kF32);
  TensorView b(reinterpret_cast<void*>(uintptr_t{1} << 45), {k, 1}, DType::kF32);
  TensorView c(&c_value, {1, 1}, DType::kF32);
  GemmOptions options;
  options.cpu_backend = CpuGemmBackend::kOpenBlas;
  absl::Status s = Gemm(ExecContext{}, a, b, c, options);
  EXPECT_TRUE(
      IsError(s, absl::StatusCode::kInvalidArgument, "exceed OpenBLAS's 32-bit dimensions"));
}

}  // namespace
}  // namespace ops
}  // namespace mt
