#include "core/ops/gemm.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/elementwise.h"
#include "core/ops/testutil.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::FromDoubles;
using ::mt::testing::RandomTensor;
using ::mt::testing::ToDoubles;
using ::mt::testing::UnitRoundoff;
using ::mt::testing::WriteDoubles;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// One product to check. batch = 0 means Gemm on rank-2 tensors, otherwise BatchedGemm.
struct Case {
  int64_t batch = 0;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  Transpose ta = Transpose::kNo;
  Transpose tb = Transpose::kNo;
  float alpha = 1.0f;
  float beta = 0.0f;
  DType dtype = DType::kF32;    // A and B.
  DType c_dtype = DType::kF32;  // C; set to dtype unless a mixed-precision case says otherwise.
  CpuGemmBackend backend = CpuGemmBackend::kDefault;
  ThreadPool* pool = nullptr;
  uint64_t seed = 0;

  std::string ToString() const {
    return absl::StrCat("batch=", batch, " M=", m, " N=", n, " K=", k,
                        " ta=", ta == Transpose::kYes, " tb=", tb == Transpose::kYes,
                        " alpha=", alpha, " beta=", beta, " dtype=", DTypeName(dtype),
                        " c_dtype=", DTypeName(c_dtype), " backend=", CpuGemmBackendName(backend),
                        " threads=", pool == nullptr ? 1 : pool->num_threads());
  }
};

// The exact result in float64 and, per element, |alpha| (|op(A)| |op(B)|)_ij + |beta| |C_ij|: the
// scale that bounds the rounding error of any summation order.
struct Reference {
  std::vector<double> value;
  std::vector<double> magnitude;
};

Reference ReferenceGemm(const Case& cs, const std::vector<double>& a, const std::vector<double>& b,
                        const std::vector<double>& c) {
  const int64_t batches = cs.batch == 0 ? 1 : cs.batch;
  const int64_t m = cs.m, n = cs.n, k = cs.k;
  const bool ta = cs.ta == Transpose::kYes, tb = cs.tb == Transpose::kYes;
  Reference ref;
  ref.value.resize(batches * m * n);
  ref.magnitude.resize(batches * m * n);
  for (int64_t bt = 0; bt < batches; ++bt) {
    const double* a_bt = a.data() + bt * m * k;
    const double* b_bt = b.data() + bt * k * n;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0, abs_sum = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double x = ta ? a_bt[p * m + i] : a_bt[i * k + p];
          const double y = tb ? b_bt[j * k + p] : b_bt[p * n + j];
          sum += x * y;
          abs_sum += std::fabs(x * y);
        }
        const int64_t idx = (bt * m + i) * n + j;
        const double alpha = cs.alpha, beta = cs.beta;
        // beta = 0 must ignore C entirely, NaNs included.
        ref.value[idx] = alpha * sum + (beta == 0 ? 0.0 : beta * c[idx]);
        ref.magnitude[idx] =
            std::fabs(alpha) * abs_sum + (beta == 0 ? 0.0 : std::fabs(beta * c[idx]));
      }
    }
  }
  return ref;
}

// f32 accumulation over K terms (c sqrt(K) u_f32, the statistical bound for rounding errors of
// random sign) plus one rounding of the result to the output dtype, relative to the magnitude.
// f16 results can be subnormal, where the rounding error is absolute: up to half of 2^-24.
::testing::AssertionResult WithinBound(const std::vector<double>& actual, const Reference& ref,
                                       int64_t k, DType dtype) {
  const double rel = UnitRoundoff(dtype) +
                     4.0 * std::sqrt(static_cast<double>(k) + 2.0) * UnitRoundoff(DType::kF32);
  const double abs = dtype == DType::kF16 ? std::ldexp(1.0, -25) : 0.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double err = std::fabs(actual[i] - ref.value[i]);
    if (!(err <= rel * ref.magnitude[i] + abs)) {
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << actual[i] << ", expected " << ref.value[i]
             << " (error " << err << " > bound " << rel * ref.magnitude[i] + abs << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

Shape MatShape(int64_t batch, int64_t rows, int64_t cols) {
  return batch == 0 ? Shape{rows, cols} : Shape{batch, rows, cols};
}

// Random A, B and C; C is NaN when beta = 0 (it must not be read). Runs the op and checks it.
void RunCase(const Case& cs) {
  SCOPED_TRACE(cs.ToString());
  const bool ta = cs.ta == Transpose::kYes, tb = cs.tb == Transpose::kYes;
  Tensor a = RandomTensor(MatShape(cs.batch, ta ? cs.k : cs.m, ta ? cs.m : cs.k), cs.dtype,
                          3 * cs.seed + 1);
  Tensor b = RandomTensor(MatShape(cs.batch, tb ? cs.n : cs.k, tb ? cs.k : cs.n), cs.dtype,
                          3 * cs.seed + 2);
  Tensor c = RandomTensor(MatShape(cs.batch, cs.m, cs.n), cs.c_dtype, 3 * cs.seed + 3);
  if (cs.beta == 0.0f) WriteDoubles(std::vector<double>(c.numel(), kNaN), c.view());
  const Reference ref =
      ReferenceGemm(cs, ToDoubles(a.view()), ToDoubles(b.view()), ToDoubles(c.view()));

  ExecContext ctx;
  ctx.pool = cs.pool;
  GemmOptions options;
  options.transpose_a = cs.ta;
  options.transpose_b = cs.tb;
  options.alpha = cs.alpha;
  options.beta = cs.beta;
  options.cpu_backend = cs.backend;
  const absl::Status status = cs.batch == 0
                                  ? Gemm(ctx, a.view(), b.view(), c.view(), options)
                                  : BatchedGemm(ctx, a.view(), b.view(), c.view(), options);
  ASSERT_TRUE(status.ok()) << status;
  // The only rounding beyond f32 accumulation is the one to C's dtype.
  EXPECT_TRUE(WithinBound(ToDoubles(c.view()), ref, cs.k, cs.c_dtype));
}

// (alpha, beta): plain product over a NaN C, accumulation, general scaling, scaled overwrite.
constexpr float kAlphaBeta[][2] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {-0.75f, 0.5f}, {2.5f, 0.0f}};
constexpr Transpose kTransposes[] = {Transpose::kNo, Transpose::kYes};

using SweepParam = std::tuple<DType, CpuGemmBackend>;

class GemmSweepTest : public ::testing::TestWithParam<SweepParam> {};

// Every (M, K, N) in {1, 3, 17, 65, 130}^3, all four transpose combinations, alpha/beta cycling.
TEST_P(GemmSweepTest, MatchesFloat64ReferenceOnOddSizes) {
  const auto [dtype, backend] = GetParam();
  const int64_t sizes[] = {1, 3, 17, 65, 130};
  int index = 0;
  for (int64_t m : sizes) {
    for (int64_t k : sizes) {
      for (int64_t n : sizes) {
        for (Transpose ta : kTransposes) {
          for (Transpose tb : kTransposes) {
            Case cs;
            cs.m = m;
            cs.n = n;
            cs.k = k;
            cs.ta = ta;
            cs.tb = tb;
            cs.alpha = kAlphaBeta[index % 4][0];
            cs.beta = kAlphaBeta[index % 4][1];
            cs.dtype = cs.c_dtype = dtype;
            cs.backend = backend;
            cs.seed = index++;
            RunCase(cs);
            if (HasFailure()) return;
          }
        }
      }
    }
  }
}

// Sizes at which both backends split the work over threads; a null pool and two threads must
// both agree with the reference.
TEST_P(GemmSweepTest, ThreadCountDoesNotChangeTheResult) {
  const auto [dtype, backend] = GetParam();
  ThreadPool pool(2);
  const int64_t shapes[][3] = {{129, 257, 190}, {300, 65, 515}};  // M, N, K
  int index = 0;
  for (const auto& shape : shapes) {
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      for (Transpose ta : kTransposes) {
        for (Transpose tb : kTransposes) {
          Case cs;
          cs.m = shape[0];
          cs.n = shape[1];
          cs.k = shape[2];
          cs.ta = ta;
          cs.tb = tb;
          cs.alpha = kAlphaBeta[index % 4][0];
          cs.beta = kAlphaBeta[index % 4][1];
          cs.dtype = cs.c_dtype = dtype;
          cs.backend = backend;
          cs.pool = p;
          cs.seed = 1000 + index++;
          RunCase(cs);
          if (HasFailure()) return;
        }
      }
    }
  }
}

TEST_P(GemmSweepTest, BatchedMatchesFloat64Reference) {
  const auto [dtype, backend] = GetParam();
  ThreadPool pool(2);
  const int64_t shapes[][4] = {{1, 3, 17, 65}, {3, 65, 17, 130}, {4, 17, 1, 3}, {2, 130, 129, 33}};
  int index = 0;
  for (const auto& shape : shapes) {
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      for (Transpose ta : kTransposes) {
        for (Transpose tb : kTransposes) {
          Case cs;
          cs.batch = shape[0];
          cs.m = shape[1];
          cs.n = shape[2];
          cs.k = shape[3];
          cs.ta = ta;
          cs.tb = tb;
          cs.alpha = kAlphaBeta[index % 4][0];
          cs.beta = kAlphaBeta[index % 4][1];
          cs.dtype = cs.c_dtype = dtype;
          cs.backend = backend;
          cs.pool = p;
          cs.seed = 2000 + index++;
          RunCase(cs);
          if (HasFailure()) return;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllDTypesAndBackends, GemmSweepTest,
    ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                       ::testing::Values(CpuGemmBackend::kEigen, CpuGemmBackend::kOpenBlas,
                                         CpuGemmBackend::kDefault)),
    [](const ::testing::TestParamInfo<SweepParam>& info) {
      const CpuGemmBackend backend = std::get<1>(info.param);
      return absl::StrCat(
          DTypeName(std::get<0>(info.param)), "_",
          backend == CpuGemmBackend::kDefault ? "default" : CpuGemmBackendName(backend));
    });

constexpr CpuGemmBackend kBackends[] = {CpuGemmBackend::kEigen, CpuGemmBackend::kOpenBlas,
                                        CpuGemmBackend::kDefault};

// Mixed precision: bf16/f16 A and B with an f32 C (weight gradients accumulated into f32 main
// grads). The result carries only f32 accumulation error: no rounding to 16 bits.
class GemmMixedPrecisionTest : public ::testing::TestWithParam<SweepParam> {};

TEST_P(GemmMixedPrecisionTest, F32OutputMatchesFloat64ReferenceOnOddSizes) {
  const auto [dtype, backend] = GetParam();
  ThreadPool pool(3);
  const int64_t sizes[] = {1, 3, 17, 65, 130};
  int index = 0;
  for (int64_t m : sizes) {
    for (int64_t k : sizes) {
      for (int64_t n : sizes) {
        for (Transpose ta : kTransposes) {
          for (Transpose tb : kTransposes) {
            Case cs;
            cs.m = m;
            cs.n = n;
            cs.k = k;
            cs.ta = ta;
            cs.tb = tb;
            cs.alpha = kAlphaBeta[index % 4][0];
            cs.beta = kAlphaBeta[index % 4][1];
            cs.dtype = dtype;
            cs.c_dtype = DType::kF32;
            cs.backend = backend;
            cs.pool = index % 2 == 0 ? nullptr : &pool;
            cs.seed = 3000 + index++;
            RunCase(cs);
            if (HasFailure()) return;
          }
        }
      }
    }
  }
}

TEST_P(GemmMixedPrecisionTest, BatchedF32OutputMatchesFloat64Reference) {
  const auto [dtype, backend] = GetParam();
  const int64_t shapes[][4] = {{1, 3, 17, 65}, {3, 65, 17, 130}, {4, 17, 1, 3}};
  int index = 0;
  for (const auto& shape : shapes) {
    for (Transpose ta : kTransposes) {
      for (Transpose tb : kTransposes) {
        Case cs;
        cs.batch = shape[0];
        cs.m = shape[1];
        cs.n = shape[2];
        cs.k = shape[3];
        cs.ta = ta;
        cs.tb = tb;
        cs.alpha = kAlphaBeta[index % 4][0];
        cs.beta = kAlphaBeta[index % 4][1];
        cs.dtype = dtype;
        cs.c_dtype = DType::kF32;
        cs.backend = backend;
        cs.seed = 4000 + index++;
        RunCase(cs);
        if (HasFailure()) return;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(HalfInputsF32Output, GemmMixedPrecisionTest,
                         ::testing::Combine(::testing::Values(DType::kBF16, DType::kF16),
                                            ::testing::Values(CpuGemmBackend::kEigen,
                                                              CpuGemmBackend::kOpenBlas,
                                                              CpuGemmBackend::kDefault)),
                         [](const ::testing::TestParamInfo<SweepParam>& info) {
                           const CpuGemmBackend backend = std::get<1>(info.param);
                           return absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                                               backend == CpuGemmBackend::kDefault
                                                   ? "default"
                                                   : CpuGemmBackendName(backend));
                         });

TEST(GemmTest, MixedPrecisionAccumulatesIntoF32WithoutRounding) {
  // A = [[1, 2^-7]], B = [[1 + 2^-7], [2^-7]] in bf16 (exact), C = [[2^-12]] f32, beta = 1:
  // C = 2^-12 + (1 + 2^-7) + 2^-14, exact in f32 but not representable in bf16 (or f16's 11 bits).
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (CpuGemmBackend backend : kBackends) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " ", CpuGemmBackendName(backend)));
      const double e7 = std::ldexp(1.0, -7);
      Tensor a = FromDoubles({1, 2}, dtype, {1, e7});
      Tensor b = FromDoubles({2, 1}, dtype, {1 + e7, e7});
      Tensor c = FromDoubles({1, 1}, DType::kF32, {std::ldexp(1.0, -12)});
      GemmOptions options;
      options.cpu_backend = backend;
      options.beta = 1.0f;
      ASSERT_TRUE(Gemm(ExecContext{}, a.view(), b.view(), c.view(), options).ok());
      const double expected = std::ldexp(1.0, -12) + 1 + e7 + std::ldexp(1.0, -14);
      EXPECT_EQ(ToDoubles(c.view())[0], expected);
      // A second accumulation adds the product again.
      ASSERT_TRUE(Gemm(ExecContext{}, a.view(), b.view(), c.view(), options).ok());
      EXPECT_EQ(ToDoubles(c.view())[0], expected + 1 + e7 + std::ldexp(1.0, -14));
    }
  }
}

TEST(GemmTest, HandComputedProduct) {
  // [[1, 2, 3], [4, 5, 6]] x [[7, 8], [9, 10], [11, 12]] = [[58, 64], [139, 154]]; then
  // alpha = 2, beta = -1 over C = [[1, 2], [3, 4]]. Exact in f32; one rounding to the dtype (bf16
  // holds 275 as 276).
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (CpuGemmBackend backend : kBackends) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " ", CpuGemmBackendName(backend)));
      Tensor a = FromDoubles({2, 3}, dtype, {1, 2, 3, 4, 5, 6});
      Tensor b = FromDoubles({3, 2}, dtype, {7, 8, 9, 10, 11, 12});
      Tensor c = FromDoubles({2, 2}, dtype, {1, 2, 3, 4});
      GemmOptions options;
      options.cpu_backend = backend;
      options.alpha = 2.0f;
      options.beta = -1.0f;
      ASSERT_TRUE(Gemm(ExecContext{}, a.view(), b.view(), c.view(), options).ok());
      EXPECT_EQ(ToDoubles(c.view()),
                ToDoubles(FromDoubles({2, 2}, dtype, {115, 126, 275, 304}).view()));

      // The same product from transposed storage: A^T stored as [3, 2], B^T as [2, 3].
      Tensor at = FromDoubles({3, 2}, dtype, {1, 4, 2, 5, 3, 6});
      Tensor bt = FromDoubles({2, 3}, dtype, {7, 9, 11, 8, 10, 12});
      options = GemmOptions{};
      options.cpu_backend = backend;
      options.transpose_a = Transpose::kYes;
      options.transpose_b = Transpose::kYes;
      ASSERT_TRUE(Gemm(ExecContext{}, at.view(), bt.view(), c.view(), options).ok());
      EXPECT_EQ(ToDoubles(c.view()), (std::vector<double>{58, 64, 139, 154}));
    }
  }
}

TEST(GemmTest, EmptyInnerDimensionAndZeroAlphaScaleC) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (CpuGemmBackend backend : kBackends) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " ", CpuGemmBackendName(backend)));
      GemmOptions options;
      options.cpu_backend = backend;
      options.beta = 0.5f;
      // K = 0: C = beta * C.
      Tensor a = Tensor::Host({2, 0}, dtype);
      Tensor b = Tensor::Host({0, 3}, dtype);
      Tensor c = FromDoubles({2, 3}, dtype, {1, -2, 3, -4, 5, -6});
      ASSERT_TRUE(Gemm(ExecContext{}, a.view(), b.view(), c.view(), options).ok());
      EXPECT_EQ(ToDoubles(c.view()), (std::vector<double>{0.5, -1, 1.5, -2, 2.5, -3}));
      // alpha = 0: A and B are not read, so their NaNs do not reach C.
      Tensor an = FromDoubles({2, 1}, dtype, {kNaN, kNaN});
      Tensor bn = FromDoubles({1, 3}, dtype, {kNaN, 1, 2});
      options.alpha = 0.0f;
      ASSERT_TRUE(Gemm(ExecContext{}, an.view(), bn.view(), c.view(), options).ok());
      EXPECT_EQ(ToDoubles(c.view()), (std::vector<double>{0.25, -0.5, 0.75, -1, 1.25, -1.5}));
      // beta = 0 with K = 0 overwrites a NaN C with zeros.
      options.beta = 0.0f;
      WriteDoubles(std::vector<double>(6, kNaN), c.view());
      ASSERT_TRUE(Gemm(ExecContext{}, a.view(), b.view(), c.view(), options).ok());
      EXPECT_EQ(ToDoubles(c.view()), std::vector<double>(6, 0.0));
      // M = 0: nothing to do.
      Tensor a0 = Tensor::Host({0, 4}, dtype);
      Tensor b0 = FromDoubles({4, 1}, dtype, {1, 2, 3, 4});
      Tensor c0 = Tensor::Host({0, 1}, dtype);
      EXPECT_TRUE(Gemm(ExecContext{}, a0.view(), b0.view(), c0.view(), options).ok());
    }
  }
}

TEST(GemmTest, BackendNames) {
  EXPECT_STREQ(CpuGemmBackendName(CpuGemmBackend::kEigen), "eigen");
  EXPECT_STREQ(CpuGemmBackendName(CpuGemmBackend::kOpenBlas), "openblas");
  // The measured winner (docs/perf/gemm.md).
  EXPECT_STREQ(CpuGemmBackendName(CpuGemmBackend::kDefault), "openblas");
}

absl::Status GemmOf(const Tensor& a, const Tensor& b, const Tensor& c,
                    const GemmOptions& options = {}) {
  return Gemm(ExecContext{}, a.view(), b.view(), c.view(), options);
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
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Gemm: A has shape [2, 3, 4] (rank 3), expected rank 2"),
            std::string::npos)
      << s;

  // BatchedGemm: rank 3 and equal batch sizes.
  Tensor b3 = RandomTensor({3, 4, 6}, DType::kF32, 7);
  Tensor c3 = RandomTensor({2, 3, 6}, DType::kF32, 8);
  s = BatchedGemm(ExecContext{}, a3.view(), b3.view(), c3.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "BatchedGemm: batch sizes differ: A is f32[2, 3, 4], B is f32[3, 4, 6], C is "
            "f32[2, 3, 6]");
  s = BatchedGemm(ExecContext{}, a.view(), b46.view(), c.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("BatchedGemm: A has shape [3, 4] (rank 2), expected rank 3"),
            std::string::npos)
      << s;
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
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Gemm: B (f32[4, 3] on cpu) must be contiguous"), std::string::npos)
      << s;

  Tensor b_bf16 = RandomTensor({4, 6}, DType::kBF16, 5);
  s = GemmOf(a, b_bf16, c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "Gemm: A and B must share one dtype and C must have it or be f32, got A f32, B bf16, "
            "C f32");
  // An f32 C is allowed for 16-bit inputs, a 16-bit C for f32 inputs is not, nor two 16-bit types.
  Tensor a_bf16 = RandomTensor({3, 4}, DType::kBF16, 6);
  Tensor c_bf16 = RandomTensor({3, 6}, DType::kBF16, 7);
  Tensor c_f16 = RandomTensor({3, 6}, DType::kF16, 8);
  EXPECT_TRUE(GemmOf(a_bf16, b_bf16, c).ok());
  s = GemmOf(a, b, c_bf16);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "Gemm: A and B must share one dtype and C must have it or be f32, got A f32, B f32, "
            "C bf16");
  s = GemmOf(a_bf16, b_bf16, c_f16);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("C f16"), std::string::npos) << s;

  TensorView on_gpu = c.view();
  on_gpu.device = Device::Cuda(0);
  s = Gemm(ExecContext{}, a.view(), b.view(), on_gpu);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Gemm: tensors on different devices"), std::string::npos) << s;

  // C aliasing an input: [3, 3] products with C on top of A.
  Tensor sq = RandomTensor({3, 3}, DType::kF32, 6);
  Tensor sq2 = RandomTensor({3, 3}, DType::kF32, 7);
  s = Gemm(ExecContext{}, sq.view(), sq2.view(), sq.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Gemm: C overlaps A"), std::string::npos) << s;
  s = Gemm(ExecContext{}, sq.view(), sq2.view(), sq2.view());
  EXPECT_NE(s.message().find("Gemm: C overlaps B"), std::string::npos) << s;
}

TEST(GemmTest, UnsupportedDTypesAndDevicesAreUnimplemented) {
  Tensor a = Tensor::Zeros({2, 2}, DType::kI32);
  Tensor b = Tensor::Zeros({2, 2}, DType::kI32);
  Tensor c = Tensor::Zeros({2, 2}, DType::kI32);
  absl::Status s = GemmOf(a, b, c);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("Gemm: A has unsupported dtype i32"), std::string::npos) << s;

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
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("exceed OpenBLAS's 32-bit dimensions"), std::string::npos) << s;
}


// ---- Fused epilogues: bias, GeLU and the pre-activation ----

double GeluTanh64(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / std::acos(-1.0)) * (x + 0.044715 * x * x * x)));
}

enum class BiasKind { kNone, kOfA, kF32 };

struct EpilogueCase {
  int64_t m = 1, n = 1, k = 1;
  Transpose ta = Transpose::kNo;
  Transpose tb = Transpose::kNo;
  float alpha = 1.0f;
  DType dtype = DType::kF32;    // A and B.
  DType c_dtype = DType::kF32;  // C and pre_activation.
  BiasKind bias = BiasKind::kNone;
  Epilogue epilogue = Epilogue::kNone;
  bool pre = false;
  CpuGemmBackend backend = CpuGemmBackend::kDefault;
  uint64_t seed = 0;

  std::string ToString() const {
    return absl::StrCat("M=", m, " N=", n, " K=", k, " ta=", ta == Transpose::kYes,
                        " tb=", tb == Transpose::kYes, " alpha=", alpha,
                        " dtype=", DTypeName(dtype), " c_dtype=", DTypeName(c_dtype),
                        " bias=", static_cast<int>(bias), " gelu=", epilogue == Epilogue::kGelu,
                        " pre=", pre, " backend=", CpuGemmBackendName(backend));
  }
};

// The operands of one epilogue case, random in [-1.5, 1.5) so that GeLU sees both of its tails;
// C and pre_activation start as NaN (beta = 0: never read).
struct EpilogueOperands {
  Tensor a, b, bias, c, pre;
  GemmOptions options;

  explicit EpilogueOperands(const EpilogueCase& cs) {
    const bool ta = cs.ta == Transpose::kYes, tb = cs.tb == Transpose::kYes;
    a = RandomTensor(ta ? Shape{cs.k, cs.m} : Shape{cs.m, cs.k}, cs.dtype, 5 * cs.seed + 1, -1.5,
                     1.5);
    b = RandomTensor(tb ? Shape{cs.n, cs.k} : Shape{cs.k, cs.n}, cs.dtype, 5 * cs.seed + 2, -1.5,
                     1.5);
    c = FromDoubles({cs.m, cs.n}, cs.c_dtype, std::vector<double>(cs.m * cs.n, kNaN));
    options.transpose_a = cs.ta;
    options.transpose_b = cs.tb;
    options.alpha = cs.alpha;
    options.cpu_backend = cs.backend;
    options.epilogue = cs.epilogue;
    if (cs.bias != BiasKind::kNone) {
      bias = RandomTensor({cs.n}, cs.bias == BiasKind::kF32 ? DType::kF32 : cs.dtype,
                          5 * cs.seed + 3, -2.0, 2.0);
      options.bias = &bias.view();
    }
    if (cs.pre) {
      pre = FromDoubles({cs.m, cs.n}, cs.c_dtype, std::vector<double>(cs.m * cs.n, kNaN));
      options.pre_activation = &pre.view();
    }
  }
};

// Checks C (and pre_activation) against float64: P = alpha op(A) op(B) + bias is within
// e_P = 4 sqrt(K + 2) u32 (|alpha| |A||B| + |bias|) of exact in f32 (as WithinBound); GeLU'
// is at most 1.13 in magnitude and its f32 evaluation adds at most 16 u32 |P| (the cancellation in
// 1 + tanh for negative P); then one rounding to the output dtype (and f16's subnormal spacing).
::testing::AssertionResult EpilogueWithinBound(const EpilogueCase& cs, const EpilogueOperands& op,
                                               const std::vector<double>& c_actual,
                                               const std::vector<double>& pre_actual) {
  const Reference ref = ReferenceGemm(
      Case{0, cs.m, cs.n, cs.k, cs.ta, cs.tb, cs.alpha, 0.0f, cs.dtype, cs.c_dtype},
      ToDoubles(op.a.view()), ToDoubles(op.b.view()), std::vector<double>(cs.m * cs.n, 0.0));
  const std::vector<double> bias =
      cs.bias == BiasKind::kNone ? std::vector<double>(cs.n, 0.0) : ToDoubles(op.bias.view());
  const double u32 = UnitRoundoff(DType::kF32), uc = UnitRoundoff(cs.c_dtype);
  const double sub = cs.c_dtype == DType::kF16 ? std::ldexp(1.0, -25) : 0.0;
  const double rel = 4.0 * std::sqrt(static_cast<double>(cs.k) + 2.0) * u32;
  const bool gelu = cs.epilogue == Epilogue::kGelu;
  for (int64_t i = 0; i < cs.m; ++i) {
    for (int64_t j = 0; j < cs.n; ++j) {
      const int64_t at = i * cs.n + j;
      const double p = ref.value[at] + bias[j];
      const double e_p = rel * (ref.magnitude[at] + std::fabs(bias[j])) + u32 * std::fabs(p);
      const double want = gelu ? GeluTanh64(p) : p;
      const double bound =
          (gelu ? 1.13 * e_p + 16 * u32 * std::fabs(p) : e_p) + uc * std::fabs(want) + sub;
      if (!(std::fabs(c_actual[at] - want) <= bound)) {
        return ::testing::AssertionFailure()
               << "C[" << i << ", " << j << "] = " << c_actual[at] << ", expected " << want
               << " (bound " << bound << ")";
      }
      if (!pre_actual.empty() &&
          !(std::fabs(pre_actual[at] - p) <= e_p + uc * std::fabs(p) + sub)) {
        return ::testing::AssertionFailure() << "pre_activation[" << i << ", " << j
                                             << "] = " << pre_actual[at] << ", expected " << p;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult SameBits(const TensorView& x, const TensorView& y) {
  if (x.dtype != y.dtype || x.shape != y.shape) {
    return ::testing::AssertionFailure() << x.DebugString() << " vs " << y.DebugString();
  }
  const char* px = static_cast<const char*>(x.data);
  const char* py = static_cast<const char*>(y.data);
  const size_t elem = DTypeSize(x.dtype);
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (std::memcmp(px + i * elem, py + i * elem, elem) != 0) {
      return ::testing::AssertionFailure() << "element " << i << " differs: " << ToDoubles(x)[i]
                                           << " vs " << ToDoubles(y)[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// Runs the case on `pool` (may be null) and checks it. (The GEMM backends' sums may depend on the
// thread count; the epilogue does not: F32IsBitwiseTheUnfusedChain compares it with BiasAdd and
// Gelu, which are bitwise thread-independent, on a pool.)
void RunEpilogueCase(const EpilogueCase& cs, ThreadPool* pool) {
  SCOPED_TRACE(cs.ToString());
  EpilogueOperands op(cs);
  ExecContext ctx;
  ctx.pool = pool;
  const absl::Status s = Gemm(ctx, op.a.view(), op.b.view(), op.c.view(), op.options);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(EpilogueWithinBound(cs, op, ToDoubles(op.c.view()),
                                  cs.pre ? ToDoubles(op.pre.view()) : std::vector<double>()));
}

TEST(GemmEpilogueTest, MatchesFloat64ReferenceOnOddSizes) {
  ThreadPool pool(3);
  const int64_t kSizes[][3] = {{1, 1, 1}, {3, 17, 5}, {17, 3, 65}, {65, 130, 17}, {130, 33, 129}};
  const struct {
    BiasKind bias;
    Epilogue epilogue;
    bool pre;
  } kEpilogues[] = {{BiasKind::kOfA, Epilogue::kNone, false},
                    {BiasKind::kF32, Epilogue::kNone, false},
                    {BiasKind::kNone, Epilogue::kGelu, false},
                    {BiasKind::kOfA, Epilogue::kGelu, false},
                    {BiasKind::kF32, Epilogue::kGelu, true},
                    {BiasKind::kOfA, Epilogue::kGelu, true},
                    {BiasKind::kNone, Epilogue::kGelu, true}};
  uint64_t seed = 1;
  for (const auto& t : ::mt::testing::kGemmDTypes) {
    for (const auto& mnk : kSizes) {
      for (const auto& e : kEpilogues) {
        EpilogueCase cs;
        cs.m = mnk[0];
        cs.n = mnk[1];
        cs.k = mnk[2];
        cs.ta = seed % 2 == 0 ? Transpose::kYes : Transpose::kNo;
        cs.tb = seed % 3 == 0 ? Transpose::kYes : Transpose::kNo;
        cs.alpha = seed % 4 == 0 ? -0.75f : 1.0f;
        cs.dtype = t.ab;
        cs.c_dtype = t.c;
        cs.bias = e.bias;
        cs.epilogue = e.epilogue;
        cs.pre = e.pre;
        cs.backend = kBackends[seed % 3];
        cs.seed = seed++;
        RunEpilogueCase(cs, seed % 2 == 0 ? &pool : nullptr);
        if (HasFailure()) return;
      }
    }
  }
}

// For an f32 C the fused epilogue is bitwise Gemm, then ops::BiasAdd, then ops::Gelu (so f32
// training does not change when nn/ fuses them); pre_activation is BiasAdd's output.
TEST(GemmEpilogueTest, F32IsBitwiseTheUnfusedChain) {
  ThreadPool pool(3);
  const int64_t kSizes[][3] = {{1, 1, 1}, {17, 33, 9}, {64, 257, 65}, {129, 96, 300}};
  uint64_t seed = 100;
  for (const auto& mnk : kSizes) {
    for (CpuGemmBackend backend : kBackends) {
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        for (bool bias : {false, true}) {
          for (Epilogue epilogue : {Epilogue::kNone, Epilogue::kGelu}) {
            if (!bias && epilogue == Epilogue::kNone) continue;
            EpilogueCase cs;
            cs.m = mnk[0];
            cs.n = mnk[1];
            cs.k = mnk[2];
            cs.ta = seed % 2 == 0 ? Transpose::kYes : Transpose::kNo;
            cs.bias = bias ? BiasKind::kOfA : BiasKind::kNone;
            cs.epilogue = epilogue;
            cs.pre = epilogue == Epilogue::kGelu;
            cs.backend = backend;
            cs.seed = seed++;
            SCOPED_TRACE(cs.ToString());
            EpilogueOperands fused(cs);
            ExecContext ctx;
            ctx.pool = p;
            ASSERT_TRUE(Gemm(ctx, fused.a.view(), fused.b.view(), fused.c.view(), fused.options)
                            .ok());

            GemmOptions plain;
            plain.transpose_a = cs.ta;
            plain.cpu_backend = backend;
            Tensor y = Tensor::Host({cs.m, cs.n}, DType::kF32);
            ASSERT_TRUE(Gemm(ctx, fused.a.view(), fused.b.view(), y.view(), plain).ok());
            if (bias) {
              ASSERT_TRUE(BiasAdd(ctx, y.view(), fused.bias.view(), y.view()).ok());
            }
            if (cs.pre) {
              EXPECT_TRUE(SameBits(fused.pre.view(), y.view()));
            }
            if (epilogue == Epilogue::kGelu) {
              ASSERT_TRUE(Gelu(ctx, y.view(), y.view()).ok());
            }
            EXPECT_TRUE(SameBits(fused.c.view(), y.view()));
          }
        }
      }
    }
  }
}

// A 16-bit C (and pre_activation) is the f32 result rounded once: bitwise the fused f32-output
// GEMM of the same 16-bit inputs, converted.
TEST(GemmEpilogueTest, HalfOutputIsTheF32ResultRoundedOnce) {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (BiasKind bias : {BiasKind::kOfA, BiasKind::kF32}) {
      EpilogueCase cs;
      cs.m = 33;
      cs.n = 40;
      cs.k = 65;
      cs.dtype = cs.c_dtype = dtype;
      cs.bias = bias;
      cs.epilogue = Epilogue::kGelu;
      cs.pre = true;
      cs.seed = 7;
      SCOPED_TRACE(cs.ToString());
      EpilogueOperands half(cs);
      ASSERT_TRUE(
          Gemm(ExecContext{}, half.a.view(), half.b.view(), half.c.view(), half.options).ok());
      cs.c_dtype = DType::kF32;
      EpilogueOperands wide(cs);
      ASSERT_TRUE(
          Gemm(ExecContext{}, wide.a.view(), wide.b.view(), wide.c.view(), wide.options).ok());
      Tensor c = Tensor::Host({cs.m, cs.n}, dtype), pre = Tensor::Host({cs.m, cs.n}, dtype);
      ASSERT_TRUE(Convert(ExecContext{}, wide.c.view(), c.view()).ok());
      ASSERT_TRUE(Convert(ExecContext{}, wide.pre.view(), pre.view()).ok());
      EXPECT_TRUE(SameBits(half.c.view(), c.view()));
      EXPECT_TRUE(SameBits(half.pre.view(), pre.view()));
    }
  }
}

TEST(GemmEpilogueTest, HandComputedBiasWithOneRounding) {
  // [1, 1] x [[256], [1]] = 257 and bias 0.75: 257.75 rounds to 258 in bf16. Rounding the product
  // first (257 -> 256, a tie to even) and then the sum (256.75 -> 256) would give 256.
  for (CpuGemmBackend backend : kBackends) {
    SCOPED_TRACE(CpuGemmBackendName(backend));
    Tensor a = FromDoubles({1, 2}, DType::kBF16, {1, 1});
    Tensor b = FromDoubles({2, 1}, DType::kBF16, {256, 1});
    Tensor bias = FromDoubles({1}, DType::kBF16, {0.75});
    Tensor c = FromDoubles({1, 1}, DType::kBF16, {kNaN});
    GemmOptions options;
    options.cpu_backend = backend;
    options.bias = &bias.view();
    ASSERT_TRUE(Gemm(ExecContext{}, a.view(), b.view(), c.view(), options).ok());
    EXPECT_EQ(ToDoubles(c.view())[0], 258.0);
  }
  // [[1, 2, 3], [4, 5, 6]] x [[7, 8], [9, 10], [11, 12]] = [[58, 64], [139, 154]], plus
  // [1, -64] in every row (exact in every dtype).
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    Tensor a = FromDoubles({2, 3}, dtype, {1, 2, 3, 4, 5, 6});
    Tensor b = FromDoubles({3, 2}, dtype, {7, 8, 9, 10, 11, 12});
    Tensor bias = FromDoubles({2}, DType::kF32, {1, -64});
    Tensor c = Tensor::Host({2, 2}, dtype);
    GemmOptions options;
    options.bias = &bias.view();
    ASSERT_TRUE(Gemm(ExecContext{}, a.view(), b.view(), c.view(), options).ok());
    EXPECT_EQ(ToDoubles(c.view()), (std::vector<double>{59, 0, 140, 90}));
  }
}

TEST(GemmEpilogueTest, ZeroProductGivesTheEpilogueOfTheBias) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (CpuGemmBackend backend : kBackends) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " ", CpuGemmBackendName(backend)));
      Tensor bias = FromDoubles({3}, dtype, {0, -30, 20});  // GeLU: 0, -0 (underflow), 20.
      Tensor pre = FromDoubles({2, 3}, dtype, std::vector<double>(6, kNaN));
      Tensor c = FromDoubles({2, 3}, dtype, std::vector<double>(6, kNaN));
      GemmOptions options;
      options.cpu_backend = backend;
      options.bias = &bias.view();
      options.epilogue = Epilogue::kGelu;
      options.pre_activation = &pre.view();
      // K = 0.
      Tensor a = Tensor::Host({2, 0}, dtype), b = Tensor::Host({0, 3}, dtype);
      ASSERT_TRUE(Gemm(ExecContext{}, a.view(), b.view(), c.view(), options).ok());
      EXPECT_EQ(ToDoubles(c.view()), (std::vector<double>{0, 0, 20, 0, 0, 20}));
      EXPECT_EQ(ToDoubles(pre.view()), (std::vector<double>{0, -30, 20, 0, -30, 20}));
      // alpha = 0: A and B are not read.
      Tensor an = FromDoubles({2, 1}, dtype, {kNaN, kNaN});
      Tensor bn = FromDoubles({1, 3}, dtype, {1, 2, 3});
      options.alpha = 0.0f;
      WriteDoubles(std::vector<double>(6, kNaN), c.view());
      ASSERT_TRUE(Gemm(ExecContext{}, an.view(), bn.view(), c.view(), options).ok());
      EXPECT_EQ(ToDoubles(c.view()), (std::vector<double>{0, 0, 20, 0, 0, 20}));
      // M = 0: nothing to do.
      Tensor a0 = Tensor::Host({0, 4}, dtype);
      Tensor b0 = FromDoubles({4, 3}, dtype, std::vector<double>(12, 1));
      Tensor c0 = Tensor::Host({0, 3}, dtype), pre0 = Tensor::Host({0, 3}, dtype);
      options.pre_activation = &pre0.view();
      EXPECT_TRUE(Gemm(ExecContext{}, a0.view(), b0.view(), c0.view(), options).ok());
    }
  }
}

TEST(GemmEpilogueTest, BadEpilogueArgumentsAreInvalidArgument) {
  Tensor a = RandomTensor({3, 4}, DType::kBF16, 1);
  Tensor b = RandomTensor({4, 6}, DType::kBF16, 2);
  Tensor c = RandomTensor({3, 6}, DType::kBF16, 3);
  Tensor bias = RandomTensor({6}, DType::kBF16, 4);
  Tensor pre = RandomTensor({3, 6}, DType::kBF16, 5);
  auto run = [&](const GemmOptions& options) {
    return Gemm(ExecContext{}, a.view(), b.view(), c.view(), options);
  };
  auto expect_invalid = [](const absl::Status& s, const std::string& message) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(message), std::string::npos) << s;
  };
  GemmOptions ok;
  ok.bias = &bias.view();
  ok.epilogue = Epilogue::kGelu;
  ok.pre_activation = &pre.view();
  ASSERT_TRUE(run(ok).ok());

  GemmOptions o = ok;
  o.beta = 1.0f;
  expect_invalid(run(o), "Gemm: a bias, epilogue or pre_activation needs beta = 0, got beta = 1");
  o = ok;
  o.epilogue = Epilogue::kNone;
  expect_invalid(run(o), "Gemm: pre_activation is only written with Epilogue::kGelu");
  o = ok;
  o.epilogue = static_cast<Epilogue>(7);
  expect_invalid(run(o), "Gemm: unknown epilogue 7");

  Tensor bias5 = RandomTensor({5}, DType::kBF16, 6);
  o = ok;
  o.bias = &bias5.view();
  expect_invalid(run(o), "Gemm: bias");
  Tensor bias_f16 = RandomTensor({6}, DType::kF16, 7);
  o.bias = &bias_f16.view();
  expect_invalid(run(o), "Gemm: bias has dtype f16, expected bf16 (the dtype of A) or f32");
  Tensor bias_2d = RandomTensor({1, 6}, DType::kBF16, 8);
  o.bias = &bias_2d.view();
  expect_invalid(run(o), "Gemm: bias");
  TensorView bias_gpu = bias.view();
  bias_gpu.device = Device::Cuda(0);
  o.bias = &bias_gpu;
  expect_invalid(run(o), "Gemm: bias is on cuda:0, expected cpu (the device of C)");
  Tensor wide = RandomTensor({2, 6}, DType::kBF16, 9);
  TensorView strided = wide.view();  // Column 0 of [2, 6] viewed as [6] with stride 6: not packed.
  strided.shape = {6};
  strided.strides = {6};
  o.bias = &strided;
  expect_invalid(run(o), "must be contiguous");
  TensorView bias_in_c(c.data(), {6}, DType::kBF16);
  o.bias = &bias_in_c;
  expect_invalid(run(o), "Gemm: bias overlaps C");

  Tensor pre_small = RandomTensor({3, 5}, DType::kBF16, 10);
  o = ok;
  o.pre_activation = &pre_small.view();
  expect_invalid(run(o), "Gemm: pre_activation");
  Tensor pre_f32 = RandomTensor({3, 6}, DType::kF32, 11);
  o.pre_activation = &pre_f32.view();
  expect_invalid(run(o), "Gemm: pre_activation has dtype f32, expected bf16 (the dtype of C)");
  o.pre_activation = &c.view();
  expect_invalid(run(o), "Gemm: pre_activation overlaps C");
  TensorView pre_in_a(a.data(), {3, 2}, DType::kBF16);
  Tensor b2 = RandomTensor({4, 2}, DType::kBF16, 12);
  Tensor c2 = RandomTensor({3, 2}, DType::kBF16, 13);
  Tensor bias2 = RandomTensor({2}, DType::kBF16, 14);
  o.bias = &bias2.view();
  o.pre_activation = &pre_in_a;
  absl::Status s = Gemm(ExecContext{}, a.view(), b2.view(), c2.view(), o);
  expect_invalid(s, "Gemm: pre_activation overlaps A");
  Tensor b41 = RandomTensor({4, 1}, DType::kBF16, 16);
  Tensor bias1 = RandomTensor({1}, DType::kBF16, 17);
  Tensor a14 = RandomTensor({1, 4}, DType::kBF16, 18);
  Tensor c1 = RandomTensor({1, 1}, DType::kBF16, 19);
  o.bias = &bias1.view();
  TensorView pre_on_bias(bias1.data(), {1, 1}, DType::kBF16);
  o.pre_activation = &pre_on_bias;
  s = Gemm(ExecContext{}, a14.view(), b41.view(), c1.view(), o);
  expect_invalid(s, "Gemm: pre_activation overlaps bias");

  // BatchedGemm takes no epilogue.
  Tensor a3 = RandomTensor({2, 3, 4}, DType::kBF16, 20);
  Tensor b3 = RandomTensor({2, 4, 6}, DType::kBF16, 21);
  Tensor c3 = RandomTensor({2, 3, 6}, DType::kBF16, 22);
  GemmOptions with_bias;
  with_bias.bias = &bias.view();
  s = BatchedGemm(ExecContext{}, a3.view(), b3.view(), c3.view(), with_bias);
  expect_invalid(s, "BatchedGemm: a bias, epilogue or pre_activation is supported by Gemm only");

  // CUDA views with an epilogue: rejected like any CUDA view without a device.
  TensorView ag = a.view(), bg = b.view(), cg = c.view(), biasg = bias.view();
  ag.device = bg.device = cg.device = biasg.device = Device::Cuda(0);
  GemmOptions on_gpu;
  on_gpu.bias = &biasg;
  on_gpu.epilogue = Epilogue::kGelu;
  EXPECT_TRUE(::mt::testing::RejectsFakeCudaViews(Gemm(ExecContext{}, ag, bg, cg, on_gpu)));
}

}  // namespace
}  // namespace ops
}  // namespace mt
