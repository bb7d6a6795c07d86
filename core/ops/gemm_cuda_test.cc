// cuBLASLt GEMMs on the GPU against the CPU backend: every transpose, dtype (and the mixed
// bf16/f16 x bf16/f16 -> f32 case), alpha/beta, odd sizes, batches and misaligned views; and the
// fused epilogues (bias of every allowed dtype, GeLU, pre_activation), both where cuBLASLt fuses
// them and where the BiasAdd/Gelu kernels take over. Skipped without a GPU.
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "core/ops/cuda_testutil.h"
#include "core/ops/gemm.h"
#include "core/ops/testutil.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::CudaOpTest;
using ::mt::testing::RandomTensor;
using ::mt::testing::ToDevice;
using ::mt::testing::ToDoubles;
using ::mt::testing::ToHost;
using ::mt::testing::UnitRoundoff;
using ::mt::testing::WithinBounds;

struct Problem {
  int64_t batch, m, n, k;
  bool ta, tb;
  float alpha, beta;
  DType ab, c;
};

std::string Name(const Problem& p) {
  return absl::StrCat(DTypeName(p.ab), "->", DTypeName(p.c), " batch ", p.batch, " M ", p.m, " N ",
                      p.n, " K ", p.k, " ta ", p.ta, " tb ", p.tb, " alpha ", p.alpha, " beta ",
                      p.beta);
}

// Both backends accumulate in f32, so each lies within 2 (K + 2) u32 (|alpha| |A||B| + |beta C0|)
// of the exact result (recursive summation bound), and a 16-bit C adds one rounding each.
std::vector<double> Bounds(const Problem& p, const std::vector<double>& a,
                           const std::vector<double>& b, const std::vector<double>& c0,
                           const std::vector<double>& expected) {
  const double u32 = UnitRoundoff(DType::kF32);
  const double uc = p.c == DType::kF32 ? 0.0 : UnitRoundoff(p.c);
  std::vector<double> bound(expected.size());
  for (int64_t bt = 0; bt < p.batch; ++bt) {
    for (int64_t i = 0; i < p.m; ++i) {
      for (int64_t j = 0; j < p.n; ++j) {
        double s = 0;
        for (int64_t l = 0; l < p.k; ++l) {
          const double av = a[bt * p.m * p.k + (p.ta ? l * p.m + i : i * p.k + l)];
          const double bv = b[bt * p.k * p.n + (p.tb ? j * p.k + l : l * p.n + j)];
          s += std::fabs(av * bv);
        }
        const int64_t at = (bt * p.m + i) * p.n + j;
        const double scale = std::fabs(p.alpha) * s + std::fabs(p.beta * c0[at]);
        bound[at] = 4.0 * (p.k + 2) * u32 * scale + 2.0 * uc * std::fabs(expected[at]) + 1e-30;
      }
    }
  }
  return bound;
}

class GemmCudaTest : public CudaOpTest {
 protected:
  void Check(const Problem& p, uint64_t seed) {
    SCOPED_TRACE(Name(p));
    const bool batched = p.batch > 1;
    auto shape = [&](int64_t r, int64_t c) {
      return batched ? Shape{p.batch, r, c} : Shape{r, c};
    };
    Tensor a = RandomTensor(p.ta ? shape(p.k, p.m) : shape(p.m, p.k), p.ab, seed);
    Tensor b = RandomTensor(p.tb ? shape(p.n, p.k) : shape(p.k, p.n), p.ab, seed + 1);
    Tensor c0 = RandomTensor(shape(p.m, p.n), p.c, seed + 2);
    GemmOptions options;
    options.transpose_a = p.ta ? Transpose::kYes : Transpose::kNo;
    options.transpose_b = p.tb ? Transpose::kYes : Transpose::kNo;
    options.alpha = p.alpha;
    options.beta = p.beta;
    auto run = [&](const ExecContext& ctx, const TensorView& av, const TensorView& bv,
                   const TensorView& cv) {
      return batched ? BatchedGemm(ctx, av, bv, cv, options) : Gemm(ctx, av, bv, cv, options);
    };
    Tensor c_cpu = RandomTensor(shape(p.m, p.n), p.c, seed + 2);  // = c0
    ASSERT_TRUE(run(cpu_, a.view(), b.view(), c_cpu.view()).ok());
    Tensor a_gpu = ToDevice(a), b_gpu = ToDevice(b), c_gpu = ToDevice(c0);
    const absl::Status s = run(gpu_, a_gpu.view(), b_gpu.view(), c_gpu.view());
    ASSERT_TRUE(s.ok()) << s;
    const std::vector<double> expected = ToDoubles(c_cpu.view());
    EXPECT_TRUE(WithinBounds(ToHost(c_gpu.view()).view(), c_cpu.view(),
                             Bounds(p, ToDoubles(a.view()), ToDoubles(b.view()),
                                    ToDoubles(c0.view()), expected)));
  }
};

TEST_F(GemmCudaTest, MatchesCpuForEveryTransposeAndDtype) {
  const int64_t kSizes[][3] = {{1, 1, 1}, {3, 17, 5}, {17, 129, 33}, {64, 96, 128}, {129, 65, 257}};
  uint64_t seed = 1;
  for (const auto& t : ::mt::testing::kGemmDTypes) {
    for (const auto& mnk : kSizes) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          const float alpha = (seed % 3 == 0) ? -1.25f : 1.0f;
          const float beta = (seed % 2 == 0) ? 0.0f : 0.75f;
          Check({1, mnk[0], mnk[1], mnk[2], ta, tb, alpha, beta, t.ab, t.c}, seed);
          seed += 3;
        }
      }
    }
  }
  EXPECT_GT(device_context_->gemm_plans(), 0u);
}

TEST_F(GemmCudaTest, BatchedMatchesCpu) {
  uint64_t seed = 100;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        Check({3, 7, 33, 17, ta, tb, 0.5f, 1.0f, dt, dt}, seed);
        Check({5, 64, 64, 64, ta, tb, 1.0f, 0.0f, dt, dt}, seed + 1);
        seed += 5;
      }
    }
  }
}

TEST_F(GemmCudaTest, RepeatedShapesReuseTheirPlan) {
  Check({1, 17, 33, 9, false, false, 1.0f, 0.0f, DType::kBF16, DType::kBF16}, 7);
  const size_t plans = device_context_->gemm_plans();
  Check({1, 17, 33, 9, false, false, 1.0f, 0.0f, DType::kBF16, DType::kBF16}, 8);
  EXPECT_EQ(device_context_->gemm_plans(), plans);
}

// Views that start two bytes into an allocation: cuBLASLt must be told they are not 16-byte
// aligned, or it picks vectorized kernels that fault.
TEST_F(GemmCudaTest, MisalignedViews) {
  const int64_t M = 9, N = 11, K = 13;
  Tensor a_big = RandomTensor({M + 1, K}, DType::kBF16, 31);
  Tensor b_big = RandomTensor({K + 1, N}, DType::kBF16, 32);
  Tensor a_dev = ToDevice(a_big), b_dev = ToDevice(b_big);
  Tensor c_dev = ToDevice(Tensor::Zeros({M + 1, N}, DType::kBF16));
  const TensorView a = a_dev.view().Slice(1, M + 1), b = b_dev.view().Slice(1, K + 1);
  const TensorView c = c_dev.view().Slice(1, M + 1);
  const absl::Status s = Gemm(gpu_, a, b, c);
  ASSERT_TRUE(s.ok()) << s;
  Tensor c_cpu = Tensor::Zeros({M, N}, DType::kBF16);
  ASSERT_TRUE(Gemm(cpu_, a_big.view().Slice(1, M + 1), b_big.view().Slice(1, K + 1), c_cpu.view())
                  .ok());
  const Problem p{1, M, N, K, false, false, 1.0f, 0.0f, DType::kBF16, DType::kBF16};
  EXPECT_TRUE(WithinBounds(
      ToHost(c).view(), c_cpu.view(),
      Bounds(p, ToDoubles(a_big.view().Slice(1, M + 1)), ToDoubles(b_big.view().Slice(1, K + 1)),
             std::vector<double>(M * N, 0.0), ToDoubles(c_cpu.view()))));
}

// K = 0 or alpha = 0: C = beta C and A, B are not read (NaNs there do not leak); beta = 0 ignores
// NaNs already in C.
TEST_F(GemmCudaTest, DegenerateProductsAndNaNs) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (DType dt : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dt));
    Tensor a = testing::FromDoubles({4, 3}, dt, std::vector<double>(12, nan));
    Tensor b = RandomTensor({3, 5}, dt, 41);
    Tensor c = RandomTensor({4, 5}, dt, 42);
    Tensor a_dev = ToDevice(a), b_dev = ToDevice(b), c_dev = ToDevice(c);
    GemmOptions options;
    options.alpha = 0.0f;
    options.beta = 0.5f;
    ASSERT_TRUE(Gemm(gpu_, a_dev.view(), b_dev.view(), c_dev.view(), options).ok());
    std::vector<double> expected = ToDoubles(c.view());
    for (double& e : expected) e *= 0.5;  // Exact: a power of two.
    EXPECT_TRUE(testing::AllClose(ToHost(c_dev.view()).view(), expected, 0, 0));

    Tensor e_a = ToDevice(Tensor::Zeros({4, 0}, dt)), e_b = ToDevice(Tensor::Zeros({0, 5}, dt));
    options.alpha = 1.0f;
    options.beta = 0.0f;
    ASSERT_TRUE(Gemm(gpu_, e_a.view(), e_b.view(), c_dev.view(), options).ok());
    EXPECT_TRUE(testing::AllClose(ToHost(c_dev.view()).view(), std::vector<double>(20, 0.0), 0, 0));

    Tensor a_ok = RandomTensor({4, 3}, dt, 43);
    Tensor c_nan = testing::FromDoubles({4, 5}, dt, std::vector<double>(20, nan));
    Tensor a_ok_dev = ToDevice(a_ok), c_nan_dev = ToDevice(c_nan);
    ASSERT_TRUE(Gemm(gpu_, a_ok_dev.view(), b_dev.view(), c_nan_dev.view()).ok());
    for (double v : ToDoubles(ToHost(c_nan_dev.view()).view())) EXPECT_FALSE(std::isnan(v));
  }
}


// ---- Fused epilogues ----

enum class BiasOf { kNone, kC, kF32, kA };

struct EpilogueProblem {
  int64_t m, n, k;
  bool ta, tb;
  DType ab, c;
  BiasOf bias;
  bool gelu, pre;
  float alpha = 1.0f;
  // Elements by which bias and pre_activation start past a 256-byte boundary (misalignment).
  int64_t offset = 0;
};

std::string Name(const EpilogueProblem& p) {
  return absl::StrCat(DTypeName(p.ab), "->", DTypeName(p.c), " M ", p.m, " N ", p.n, " K ", p.k,
                      " ta ", p.ta, " tb ", p.tb, " bias ", static_cast<int>(p.bias), " gelu ",
                      p.gelu, " pre ", p.pre, " alpha ", p.alpha, " offset ", p.offset);
}

class GemmCudaEpilogueTest : public CudaOpTest {
 protected:
  void Check(const EpilogueProblem& p, uint64_t seed) {
    SCOPED_TRACE(Name(p));
    const double nan = std::numeric_limits<double>::quiet_NaN();
    Tensor a = RandomTensor(p.ta ? Shape{p.k, p.m} : Shape{p.m, p.k}, p.ab, seed, -1.5, 1.5);
    Tensor b = RandomTensor(p.tb ? Shape{p.n, p.k} : Shape{p.k, p.n}, p.ab, seed + 1, -1.5, 1.5);
    const DType bias_dtype =
        p.bias == BiasOf::kC ? p.c : (p.bias == BiasOf::kA ? p.ab : DType::kF32);
    // Bias and pre_activation live `offset` elements into larger buffers.
    Tensor bias_full = RandomTensor({p.offset + p.n}, bias_dtype, seed + 2, -2.0, 2.0);
    const TensorView bias = bias_full.view().Slice(p.offset, p.offset + p.n);
    Tensor pre_full = testing::FromDoubles({p.offset + p.m * p.n}, p.c,
                                           std::vector<double>(p.offset + p.m * p.n, nan));
    Tensor c = testing::FromDoubles({p.m, p.n}, p.c, std::vector<double>(p.m * p.n, nan));
    auto pre_view = [&](const Tensor& full) {
      TensorView v = full.view().Slice(p.offset, p.offset + p.m * p.n);
      v.shape = {p.m, p.n};
      v.strides = {p.n, 1};
      return v;
    };
    GemmOptions options;
    options.transpose_a = p.ta ? Transpose::kYes : Transpose::kNo;
    options.transpose_b = p.tb ? Transpose::kYes : Transpose::kNo;
    options.alpha = p.alpha;
    options.epilogue = p.gelu ? Epilogue::kGelu : Epilogue::kNone;

    Tensor c_cpu = testing::FromDoubles({p.m, p.n}, p.c, std::vector<double>(p.m * p.n, nan));
    Tensor pre_cpu = testing::FromDoubles(
        {p.offset + p.m * p.n}, p.c, std::vector<double>(p.offset + p.m * p.n, nan));
    const TensorView pre_cpu_view = pre_view(pre_cpu);
    if (p.bias != BiasOf::kNone) options.bias = &bias;
    if (p.pre) options.pre_activation = &pre_cpu_view;
    absl::Status s = Gemm(cpu_, a.view(), b.view(), c_cpu.view(), options);
    ASSERT_TRUE(s.ok()) << s;

    Tensor a_gpu = ToDevice(a), b_gpu = ToDevice(b), bias_gpu = ToDevice(bias_full);
    Tensor c_gpu = ToDevice(c), pre_gpu = ToDevice(pre_full);
    const TensorView bias_gpu_view = bias_gpu.view().Slice(p.offset, p.offset + p.n);
    const TensorView pre_gpu_view = pre_view(pre_gpu);
    if (p.bias != BiasOf::kNone) options.bias = &bias_gpu_view;
    if (p.pre) options.pre_activation = &pre_gpu_view;
    s = Gemm(gpu_, a_gpu.view(), b_gpu.view(), c_gpu.view(), options);
    ASSERT_TRUE(s.ok()) << s;

    // P = alpha A B + bias: both backends within 2 (K + 2) u32 (|alpha||A||B| + |bias|) of exact
    // (recursive summation), so 4 (K + 2) u32 apart. GeLU' is at most 1.13; cuBLASLt evaluates
    // GeLU's tanh its own way (possibly the hardware tanh, relative error 2^-11), so 2^-10 |P|
    // more. Each 16-bit output adds one rounding on each side (and f16's subnormal spacing).
    const std::vector<double> av = ToDoubles(a.view()), bv = ToDoubles(b.view());
    const std::vector<double> biasv =
        p.bias == BiasOf::kNone ? std::vector<double>(p.n, 0.0) : ToDoubles(bias);
    const std::vector<double> c_want = ToDoubles(c_cpu.view());
    const std::vector<double> pre_want = ToDoubles(pre_cpu_view);
    const double u32 = UnitRoundoff(DType::kF32);
    const double uc = p.c == DType::kF32 ? 0.0 : UnitRoundoff(p.c);
    const double sub = p.c == DType::kF16 ? std::ldexp(1.0, -24) : 0.0;
    std::vector<double> c_bound(p.m * p.n), pre_bound(p.m * p.n);
    for (int64_t i = 0; i < p.m; ++i) {
      for (int64_t j = 0; j < p.n; ++j) {
        double sum = 0, abs_sum = 0;
        for (int64_t l = 0; l < p.k; ++l) {
          const double x = av[p.ta ? l * p.m + i : i * p.k + l];
          const double y = bv[p.tb ? j * p.k + l : l * p.n + j];
          sum += x * y;
          abs_sum += std::fabs(x * y);
        }
        const double pv = p.alpha * sum + biasv[j];
        const double e_p =
            4.0 * (p.k + 2) * u32 * (std::fabs(p.alpha) * abs_sum + std::fabs(biasv[j]));
        const int64_t at = i * p.n + j;
        pre_bound[at] = e_p + 2.0 * uc * std::fabs(pv) + sub + 1e-30;
        c_bound[at] = (p.gelu ? 1.13 * e_p + std::ldexp(std::fabs(pv), -10) : e_p) +
                      2.0 * uc * std::fabs(c_want[at]) + sub + 1e-30;
      }
    }
    EXPECT_TRUE(WithinBounds(ToHost(c_gpu.view()).view(), c_cpu.view(), c_bound));
    if (p.pre) {
      EXPECT_TRUE(WithinBounds(ToHost(pre_gpu_view).view(), pre_cpu_view, pre_bound));
    } else {
      // Untouched.
      for (double v : ToDoubles(ToHost(pre_gpu.view()).view())) ASSERT_TRUE(std::isnan(v));
    }
  }
};

TEST_F(GemmCudaEpilogueTest, MatchesCpuForEveryDtypeBiasAndEpilogue) {
  // N = 96 and 64 are multiples of 8 (cuBLASLt can write the pre-activation); 17 and 129 are not.
  const int64_t kSizes[][3] = {{1, 1, 1}, {3, 17, 5}, {17, 129, 33}, {64, 96, 128}, {129, 64, 257}};
  const struct {
    BiasOf bias;
    bool gelu, pre;
  } kEpilogues[] = {{BiasOf::kC, false, false},    {BiasOf::kF32, false, false},
                    {BiasOf::kA, false, false},    {BiasOf::kNone, true, false},
                    {BiasOf::kC, true, false},     {BiasOf::kNone, true, true},
                    {BiasOf::kC, true, true},      {BiasOf::kF32, true, true},
                    {BiasOf::kA, true, true}};
  uint64_t seed = 1;
  for (const auto& t : ::mt::testing::kGemmDTypes) {
    for (const auto& mnk : kSizes) {
      for (const auto& e : kEpilogues) {
        EpilogueProblem p{mnk[0], mnk[1], mnk[2], seed % 2 == 0, seed % 3 == 0, t.ab, t.c,
                          e.bias, e.gelu, e.pre};
        p.alpha = seed % 4 == 0 ? -0.75f : 1.0f;
        Check(p, seed);
        seed += 3;
        if (HasFailure()) return;
      }
    }
  }
}

// Bias and pre-activation pointers off 16-byte alignment: a plan of their own (or the unfused
// path), never a kernel that assumes aligned vectors.
TEST_F(GemmCudaEpilogueTest, MisalignedBiasAndPreActivation) {
  for (DType dt : {DType::kBF16, DType::kF32}) {
    for (int64_t offset : {1, 2, 3}) {
      EpilogueProblem p{33, 64, 40, false, false, dt, dt, BiasOf::kC, true, true};
      p.offset = offset;
      Check(p, 50 + offset);
      p.pre = false;
      Check(p, 60 + offset);
    }
  }
}

TEST_F(GemmCudaEpilogueTest, RepeatedCallsReuseTheirPlan) {
  const EpilogueProblem p{17, 64, 9, false, true, DType::kBF16, DType::kBF16, BiasOf::kC, true,
                          true};
  Check(p, 7);
  const size_t plans = device_context_->gemm_plans();
  Check(p, 8);
  EXPECT_EQ(device_context_->gemm_plans(), plans);
}

// K = 0 and alpha = 0: C = epilogue(bias), A and B unread.
TEST_F(GemmCudaEpilogueTest, ZeroProduct) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dt : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dt));
    Tensor bias = testing::FromDoubles({3}, dt, {0, -30, 20});
    Tensor a = ToDevice(testing::FromDoubles({2, 1}, dt, {nan, nan}));
    Tensor b = ToDevice(testing::FromDoubles({1, 3}, dt, {1, 2, 3}));
    Tensor e_a = ToDevice(Tensor::Zeros({2, 0}, dt)), e_b = ToDevice(Tensor::Zeros({0, 3}, dt));
    Tensor bias_gpu = ToDevice(bias);
    for (float alpha : {1.0f, 0.0f}) {
      Tensor c = ToDevice(testing::FromDoubles({2, 3}, dt, std::vector<double>(6, nan)));
      Tensor pre = ToDevice(testing::FromDoubles({2, 3}, dt, std::vector<double>(6, nan)));
      GemmOptions options;
      options.alpha = alpha;
      options.bias = &bias_gpu.view();
      options.epilogue = Epilogue::kGelu;
      options.pre_activation = &pre.view();
      const absl::Status s = alpha == 0.0f
                                 ? Gemm(gpu_, a.view(), b.view(), c.view(), options)
                                 : Gemm(gpu_, e_a.view(), e_b.view(), c.view(), options);
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_TRUE(testing::AllClose(ToHost(c.view()).view(), {0, 0, 20, 0, 0, 20}, 0, 0));
      EXPECT_TRUE(testing::AllClose(ToHost(pre.view()).view(), {0, -30, 20, 0, -30, 20}, 0, 0));
    }
  }
}

}  // namespace
}  // namespace ops
}  // namespace mt
