// cuBLASLt GEMMs on the GPU against the CPU backend: every transpose, dtype (and the mixed
// bf16/f16 x bf16/f16 -> f32 case), alpha/beta, odd sizes, batches and misaligned views; and the
// fused epilogues (bias of every allowed dtype, GeLU, pre_activation), both where cuBLASLt fuses
// them and where the BiasAdd/Gelu kernels take over. Skipped without a GPU.
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/cuda_testutil.h"
#include "core/ops/gemm.h"
#include "core/ops/gemm_testutil.h"
#include "core/ops/testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::AllClose;
using ::mt::testing::CudaOpTest;
using ::mt::testing::FromDoubles;
using ::mt::testing::GemmCase;
using ::mt::testing::GemmReference;
using ::mt::testing::GpuWithinBounds;
using ::mt::testing::Mirror;
using ::mt::testing::Mirrored;
using ::mt::testing::MirrorNaN;
using ::mt::testing::NaNTensor;
using ::mt::testing::RandomTensor;
using ::mt::testing::ReferenceGemm;
using ::mt::testing::Side;
using ::mt::testing::ToDevice;
using ::mt::testing::ToDoubles;
using ::mt::testing::ToHost;
using ::mt::testing::UnitRoundoff;

const double kU32 = UnitRoundoff(DType::kF32);

// A plain (batch 0) or batched problem with C of the dtype of A and B, or f32.
GemmCase Problem(int64_t batch, int64_t m, int64_t n, int64_t k, bool ta, bool tb, float alpha,
                 float beta, DType ab, DType c) {
  GemmCase p;
  p.batch = batch;
  p.m = m;
  p.n = n;
  p.k = k;
  p.ta = ta ? Transpose::kYes : Transpose::kNo;
  p.tb = tb ? Transpose::kYes : Transpose::kNo;
  p.alpha = alpha;
  p.beta = beta;
  p.dtype = ab;
  p.c_dtype = c;
  return p;
}

// Both backends accumulate in f32, so each lies within 2 (K + 2) u32 (|alpha| |A||B| + |beta C0|)
// of the exact result (recursive summation bound), and a 16-bit C adds one rounding each.
std::vector<double> Bounds(const GemmCase& p, const TensorView& a, const TensorView& b,
                           const TensorView& c0, const TensorView& expected) {
  const GemmReference ref = ReferenceGemm(p, ToDoubles(a), ToDoubles(b), ToDoubles(c0));
  const std::vector<double> want = ToDoubles(expected);
  const double uc = p.c_dtype == DType::kF32 ? 0.0 : UnitRoundoff(p.c_dtype);
  std::vector<double> bound(want.size());
  for (size_t i = 0; i < bound.size(); ++i) {
    bound[i] = 4.0 * (p.k + 2) * kU32 * ref.magnitude[i] + 2.0 * uc * std::fabs(want[i]) + 1e-30;
  }
  return bound;
}

class GemmCudaTest : public CudaOpTest {
 protected:
  void Check(const GemmCase& p, uint64_t seed) {
    SCOPED_TRACE(p.ToString());
    const Mirrored a = Mirror(RandomTensor(p.AShape(), p.dtype, seed));
    const Mirrored b = Mirror(RandomTensor(p.BShape(), p.dtype, seed + 1));
    const Tensor c0 = RandomTensor(p.CShape(), p.c_dtype, seed + 2);
    const Mirrored c = Mirror(c0.view());
    const GemmOptions options = p.Options();
    ASSERT_TRUE(OnBoth([&](const ExecContext& ec, Side s) {
      return p.batch == 0 ? Gemm(ec, a[s], b[s], c[s], options)
                          : BatchedGemm(ec, a[s], b[s], c[s], options);
    }));
    EXPECT_TRUE(
        GpuWithinBounds(c[Side::kGpu], c[Side::kCpu],
                        Bounds(p, a.cpu().view(), b.cpu().view(), c0.view(), c.cpu().view())));
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
          Check(Problem(0, mnk[0], mnk[1], mnk[2], ta, tb, alpha, beta, t.ab, t.c), seed);
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
        Check(Problem(3, 7, 33, 17, ta, tb, 0.5f, 1.0f, dt, dt), seed);
        Check(Problem(5, 64, 64, 64, ta, tb, 1.0f, 0.0f, dt, dt), seed + 1);
        seed += 5;
      }
    }
  }
}

TEST_F(GemmCudaTest, RepeatedShapesReuseTheirPlan) {
  const GemmCase p = Problem(0, 17, 33, 9, false, false, 1.0f, 0.0f, DType::kBF16, DType::kBF16);
  Check(p, 7);
  const size_t plans = device_context_->gemm_plans();
  Check(p, 8);
  EXPECT_EQ(device_context_->gemm_plans(), plans);
}

// Views that start two bytes into an allocation: cuBLASLt must be told they are not 16-byte
// aligned, or it picks vectorized kernels that fault.
TEST_F(GemmCudaTest, MisalignedViews) {
  const int64_t M = 9, N = 11, K = 13;
  const Mirrored a_big = Mirror(RandomTensor({M + 1, K}, DType::kBF16, 31));
  const Mirrored b_big = Mirror(RandomTensor({K + 1, N}, DType::kBF16, 32));
  const Mirrored c_big = Mirror(Tensor::Zeros({M + 1, N}, DType::kBF16));
  ASSERT_TRUE(OnBoth([&](const ExecContext& ec, Side s) {
    return Gemm(ec, a_big[s].Slice(1, M + 1), b_big[s].Slice(1, K + 1), c_big[s].Slice(1, M + 1));
  }));
  const TensorView c_cpu = c_big[Side::kCpu].Slice(1, M + 1);
  const GemmCase p = Problem(0, M, N, K, false, false, 1.0f, 0.0f, DType::kBF16, DType::kBF16);
  EXPECT_TRUE(GpuWithinBounds(
      c_big[Side::kGpu].Slice(1, M + 1), c_cpu,
      Bounds(p, a_big.cpu().view().Slice(1, M + 1), b_big.cpu().view().Slice(1, K + 1),
             Tensor::Zeros({M, N}, DType::kBF16).view(), c_cpu)));
}

// K = 0 or alpha = 0: C = beta C and A, B are not read (NaNs there do not leak); beta = 0 ignores
// NaNs already in C.
TEST_F(GemmCudaTest, DegenerateProductsAndNaNs) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dt));
    const Tensor a = ToDevice(NaNTensor({4, 3}, dt));
    const Tensor b = ToDevice(RandomTensor({3, 5}, dt, 41));
    const Tensor c_host = RandomTensor({4, 5}, dt, 42);
    const Tensor c = ToDevice(c_host);
    GemmOptions options;
    options.alpha = 0.0f;
    options.beta = 0.5f;
    ASSERT_TRUE(Gemm(gpu_, a.view(), b.view(), c.view(), options).ok());
    std::vector<double> expected = ToDoubles(c_host.view());
    for (double& e : expected) e *= 0.5;  // Exact: a power of two.
    EXPECT_TRUE(AllClose(ToHost(c.view()).view(), expected, 0, 0));

    const Tensor e_a = ToDevice(Tensor::Zeros({4, 0}, dt)),
                 e_b = ToDevice(Tensor::Zeros({0, 5}, dt));
    options.alpha = 1.0f;
    options.beta = 0.0f;
    ASSERT_TRUE(Gemm(gpu_, e_a.view(), e_b.view(), c.view(), options).ok());
    EXPECT_TRUE(AllClose(ToHost(c.view()).view(), std::vector<double>(20, 0.0), 0, 0));

    const Tensor a_ok = ToDevice(RandomTensor({4, 3}, dt, 43));
    const Tensor c_nan = ToDevice(NaNTensor({4, 5}, dt));
    ASSERT_TRUE(Gemm(gpu_, a_ok.view(), b.view(), c_nan.view()).ok());
    for (double v : ToDoubles(ToHost(c_nan.view()).view())) EXPECT_FALSE(std::isnan(v));
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
    const GemmCase g = Problem(0, p.m, p.n, p.k, p.ta, p.tb, p.alpha, 0.0f, p.ab, p.c);
    const Mirrored a = Mirror(RandomTensor(g.AShape(), p.ab, seed, -1.5, 1.5));
    const Mirrored b = Mirror(RandomTensor(g.BShape(), p.ab, seed + 1, -1.5, 1.5));
    const DType bias_dtype =
        p.bias == BiasOf::kC ? p.c : (p.bias == BiasOf::kA ? p.ab : DType::kF32);
    // Bias and pre_activation live `offset` elements into larger buffers.
    const Mirrored bias_full =
        Mirror(RandomTensor({p.offset + p.n}, bias_dtype, seed + 2, -2.0, 2.0));
    const Mirrored pre_full = MirrorNaN({p.offset + p.m * p.n}, p.c);
    const Mirrored c = MirrorNaN({p.m, p.n}, p.c);
    auto bias = [&](Side s) { return bias_full[s].Slice(p.offset, p.offset + p.n); };
    auto pre = [&](Side s) {
      TensorView v = pre_full[s].Slice(p.offset, p.offset + p.m * p.n);
      v.shape = {p.m, p.n};
      v.strides = {p.n, 1};
      return v;
    };
    ASSERT_TRUE(OnBoth([&](const ExecContext& ec, Side s) {
      GemmOptions options = g.Options();
      options.epilogue = p.gelu ? Epilogue::kGelu : Epilogue::kNone;
      const TensorView bias_view = bias(s), pre_view = pre(s);
      if (p.bias != BiasOf::kNone) options.bias = &bias_view;
      if (p.pre) options.pre_activation = &pre_view;
      return Gemm(ec, a[s], b[s], c[s], options);
    }));

    // P = alpha A B + bias: both backends within 2 (K + 2) u32 (|alpha||A||B| + |bias|) of exact
    // (recursive summation), so 4 (K + 2) u32 apart. GeLU' is at most 1.13; cuBLASLt evaluates
    // GeLU's tanh its own way (possibly the hardware tanh, relative error 2^-11), so 2^-10 |P|
    // more. Each 16-bit output adds one rounding on each side (and f16's subnormal spacing).
    const GemmReference ref = ReferenceGemm(g, ToDoubles(a.cpu().view()), ToDoubles(b.cpu().view()),
                                            std::vector<double>());
    const std::vector<double> biasv =
        p.bias == BiasOf::kNone ? std::vector<double>(p.n, 0.0) : ToDoubles(bias(Side::kCpu));
    const std::vector<double> c_want = ToDoubles(c.cpu().view());
    const double uc = p.c == DType::kF32 ? 0.0 : UnitRoundoff(p.c);
    const double sub = p.c == DType::kF16 ? std::ldexp(1.0, -24) : 0.0;
    std::vector<double> c_bound(p.m * p.n), pre_bound(p.m * p.n);
    for (int64_t at = 0; at < p.m * p.n; ++at) {
      const double bias_j = biasv[at % p.n];
      const double pv = ref.value[at] + bias_j;
      const double e_p = 4.0 * (p.k + 2) * kU32 * (ref.magnitude[at] + std::fabs(bias_j));
      pre_bound[at] = e_p + 2.0 * uc * std::fabs(pv) + sub + 1e-30;
      c_bound[at] = (p.gelu ? 1.13 * e_p + std::ldexp(std::fabs(pv), -10) : e_p) +
                    2.0 * uc * std::fabs(c_want[at]) + sub + 1e-30;
    }
    EXPECT_TRUE(GpuWithinBounds(c[Side::kGpu], c[Side::kCpu], c_bound));
    if (p.pre) {
      EXPECT_TRUE(GpuWithinBounds(pre(Side::kGpu), pre(Side::kCpu), pre_bound));
    } else {
      // Untouched.
      for (double v : ToDoubles(pre_full.GpuToHost().view())) ASSERT_TRUE(std::isnan(v));
    }
  }
};

TEST_F(GemmCudaEpilogueTest, MatchesCpuForEveryDtypeBiasAndEpilogue) {
  // N = 96 and 64 are multiples of 8 (cuBLASLt can write the pre-activation); 17 and 129 are not.
  const int64_t kSizes[][3] = {{1, 1, 1}, {3, 17, 5}, {17, 129, 33}, {64, 96, 128}, {129, 64, 257}};
  const struct {
    BiasOf bias;
    bool gelu, pre;
  } kEpilogues[] = {
      {BiasOf::kC, false, false},   {BiasOf::kF32, false, false}, {BiasOf::kA, false, false},
      {BiasOf::kNone, true, false}, {BiasOf::kC, true, false},    {BiasOf::kNone, true, true},
      {BiasOf::kC, true, true},     {BiasOf::kF32, true, true},   {BiasOf::kA, true, true}};
  uint64_t seed = 1;
  for (const auto& t : ::mt::testing::kGemmDTypes) {
    for (const auto& mnk : kSizes) {
      for (const auto& e : kEpilogues) {
        EpilogueProblem p{mnk[0], mnk[1], mnk[2], seed % 2 == 0, seed % 3 == 0,
                          t.ab,   t.c,    e.bias, e.gelu,        e.pre};
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
  const EpilogueProblem p{17,           64,           9,          false, true,
                          DType::kBF16, DType::kBF16, BiasOf::kC, true,  true};
  Check(p, 7);
  const size_t plans = device_context_->gemm_plans();
  Check(p, 8);
  EXPECT_EQ(device_context_->gemm_plans(), plans);
}

// K = 0 and alpha = 0: C = epilogue(bias), A and B unread.
TEST_F(GemmCudaEpilogueTest, ZeroProduct) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dt));
    const Tensor bias_gpu = ToDevice(FromDoubles({3}, dt, {0, -30, 20}));
    const Tensor a = ToDevice(NaNTensor({2, 1}, dt));
    const Tensor b = ToDevice(FromDoubles({1, 3}, dt, {1, 2, 3}));
    const Tensor e_a = ToDevice(Tensor::Zeros({2, 0}, dt)),
                 e_b = ToDevice(Tensor::Zeros({0, 3}, dt));
    for (float alpha : {1.0f, 0.0f}) {
      const Tensor c = ToDevice(NaNTensor({2, 3}, dt)), pre = ToDevice(NaNTensor({2, 3}, dt));
      GemmOptions options;
      options.alpha = alpha;
      options.bias = &bias_gpu.view();
      options.epilogue = Epilogue::kGelu;
      options.pre_activation = &pre.view();
      const absl::Status s = alpha == 0.0f ? Gemm(gpu_, a.view(), b.view(), c.view(), options)
                                           : Gemm(gpu_, e_a.view(), e_b.view(), c.view(), options);
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_TRUE(AllClose(ToHost(c.view()).view(), {0, 0, 20, 0, 0, 20}, 0, 0));
      EXPECT_TRUE(AllClose(ToHost(pre.view()).view(), {0, -30, 20, 0, -30, 20}, 0, 0));
    }
  }
}

}  // namespace
}  // namespace ops
}  // namespace mt
