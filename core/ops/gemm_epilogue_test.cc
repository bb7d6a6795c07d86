// The fused epilogues of ops::Gemm on the CPU (bias of A's dtype or f32, GeLU, the
// pre-activation): against float64 on odd sizes for every dtype pair and backend; bitwise the
// unfused chain (Gemm, BiasAdd, Gelu) for f32; a 16-bit output as the f32 result rounded once;
// hand-computed cases; and the argument errors.
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/elementwise.h"
#include "core/ops/gemm.h"
#include "core/ops/gemm_testutil.h"
#include "core/ops/testutil.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::FromDoubles;
using ::mt::testing::GeluReference;
using ::mt::testing::GemmCase;
using ::mt::testing::GemmParam;
using ::mt::testing::GemmReference;
using ::mt::testing::kGemmBackends;
using ::mt::testing::NaNTensor;
using ::mt::testing::RandomTensor;
using ::mt::testing::ReferenceGemm;
using ::mt::testing::SameBits;
using ::mt::testing::ToDoubles;
using ::mt::testing::UnitRoundoff;
using ::mt::testing::WriteDoubles;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

enum class BiasKind { kNone, kOfA, kF32 };

// A Gemm (batch 0, beta 0) with a fused epilogue.
struct EpilogueCase : GemmCase {
  BiasKind bias = BiasKind::kNone;
  Epilogue epilogue = Epilogue::kNone;
  bool pre = false;

  std::string ToString() const {
    return absl::StrCat(GemmCase::ToString(), " bias=", static_cast<int>(bias),
                        " gelu=", epilogue == Epilogue::kGelu, " pre=", pre);
  }
};

// The operands of one epilogue case, random in [-1.5, 1.5) so that GeLU sees both of its tails;
// C and pre_activation start as NaN (beta = 0: never read).
struct EpilogueOperands {
  Tensor a, b, bias, c, pre;
  GemmOptions options;

  explicit EpilogueOperands(const EpilogueCase& cs) : options(cs.Options()) {
    a = RandomTensor(cs.AShape(), cs.dtype, 5 * cs.seed + 1, -1.5, 1.5);
    b = RandomTensor(cs.BShape(), cs.dtype, 5 * cs.seed + 2, -1.5, 1.5);
    c = NaNTensor(cs.CShape(), cs.c_dtype);
    options.epilogue = cs.epilogue;
    if (cs.bias != BiasKind::kNone) {
      bias = RandomTensor({cs.n}, cs.bias == BiasKind::kF32 ? DType::kF32 : cs.dtype,
                          5 * cs.seed + 3, -2.0, 2.0);
      options.bias = &bias.view();
    }
    if (cs.pre) {
      pre = NaNTensor(cs.CShape(), cs.c_dtype);
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
  const GemmReference ref = ReferenceGemm(cs, ToDoubles(op.a.view()), ToDoubles(op.b.view()),
                                          std::vector<double>(cs.m * cs.n, 0.0));
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
      const double want = gelu ? GeluReference(p) : p;
      const double bound =
          (gelu ? 1.13 * e_p + 16 * u32 * std::fabs(p) : e_p) + uc * std::fabs(want) + sub;
      if (!(std::fabs(c_actual[at] - want) <= bound)) {
        return ::testing::AssertionFailure() << "C[" << i << ", " << j << "] = " << c_actual[at]
                                             << ", expected " << want << " (bound " << bound << ")";
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
  } kEpilogues[] = {
      {BiasKind::kOfA, Epilogue::kNone, false},  {BiasKind::kF32, Epilogue::kNone, false},
      {BiasKind::kNone, Epilogue::kGelu, false}, {BiasKind::kOfA, Epilogue::kGelu, false},
      {BiasKind::kF32, Epilogue::kGelu, true},   {BiasKind::kOfA, Epilogue::kGelu, true},
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
        cs.backend = kGemmBackends[seed % std::size(kGemmBackends)];
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
    for (CpuGemmBackend backend : kGemmBackends) {
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
            ASSERT_TRUE(
                Gemm(ctx, fused.a.view(), fused.b.view(), fused.c.view(), fused.options).ok());

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
  for (CpuGemmBackend backend : kGemmBackends) {
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

class GemmEpilogueDTypeTest : public ::testing::TestWithParam<GemmParam> {
 protected:
  void SetUp() override {
    if (!::mt::testing::BackendRunsHere(std::get<1>(GetParam()))) {
      GTEST_SKIP() << "the packed GEMM needs AVX2 and FMA";
    }
  }
};

TEST_P(GemmEpilogueDTypeTest, ZeroProductGivesTheEpilogueOfTheBias) {
  const auto [dtype, backend] = GetParam();
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

INSTANTIATE_TEST_SUITE_P(AllDTypesAndBackends, GemmEpilogueDTypeTest,
                         ::mt::testing::AllGemmParams(), ::mt::testing::GemmParamName);

// A bf16 [3, 4] x [4, 6] product with a valid bias, GeLU epilogue and pre_activation (ok_); the
// tests change one option at a time.
class GemmEpilogueArgumentsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ok_.bias = &bias_.view();
    ok_.epilogue = Epilogue::kGelu;
    ok_.pre_activation = &pre_.view();
    ASSERT_TRUE(Run(ok_).ok());
  }
  absl::Status Run(const GemmOptions& options) {
    return Gemm(ExecContext{}, a_.view(), b_.view(), c_.view(), options);
  }
  static ::testing::AssertionResult Invalid(const absl::Status& s, const std::string& message) {
    return ::mt::testing::IsError(s, absl::StatusCode::kInvalidArgument, message);
  }

  const Tensor a_ = RandomTensor({3, 4}, DType::kBF16, 1);
  const Tensor b_ = RandomTensor({4, 6}, DType::kBF16, 2);
  const Tensor c_ = RandomTensor({3, 6}, DType::kBF16, 3);
  const Tensor bias_ = RandomTensor({6}, DType::kBF16, 4);
  const Tensor pre_ = RandomTensor({3, 6}, DType::kBF16, 5);
  GemmOptions ok_;
};

TEST_F(GemmEpilogueArgumentsTest, BadOptionsAreInvalidArgument) {
  GemmOptions o = ok_;
  o.beta = 1.0f;
  EXPECT_TRUE(
      Invalid(Run(o), "Gemm: a bias, epilogue or pre_activation needs beta = 0, got beta = 1"));
  o = ok_;
  o.epilogue = Epilogue::kNone;
  EXPECT_TRUE(Invalid(Run(o), "Gemm: pre_activation is only written with Epilogue::kGelu"));
  o = ok_;
  o.epilogue = static_cast<Epilogue>(7);
  EXPECT_TRUE(Invalid(Run(o), "Gemm: unknown epilogue 7"));

  // BatchedGemm takes no epilogue.
  Tensor a3 = RandomTensor({2, 3, 4}, DType::kBF16, 20);
  Tensor b3 = RandomTensor({2, 4, 6}, DType::kBF16, 21);
  Tensor c3 = RandomTensor({2, 3, 6}, DType::kBF16, 22);
  GemmOptions with_bias;
  with_bias.bias = &bias_.view();
  EXPECT_TRUE(Invalid(BatchedGemm(ExecContext{}, a3.view(), b3.view(), c3.view(), with_bias),
                      "BatchedGemm: a bias, epilogue or pre_activation is supported by Gemm only"));

  // CUDA views with an epilogue: rejected like any CUDA view without a device.
  TensorView ag = a_.view(), bg = b_.view(), cg = c_.view(), biasg = bias_.view();
  ag.device = bg.device = cg.device = biasg.device = Device::Cuda(0);
  GemmOptions on_gpu;
  on_gpu.bias = &biasg;
  on_gpu.epilogue = Epilogue::kGelu;
  EXPECT_TRUE(::mt::testing::RejectsFakeCudaViews(Gemm(ExecContext{}, ag, bg, cg, on_gpu)));
}

TEST_F(GemmEpilogueArgumentsTest, BadBiasesAreInvalidArgument) {
  GemmOptions o = ok_;
  Tensor bias5 = RandomTensor({5}, DType::kBF16, 6);
  o.bias = &bias5.view();
  EXPECT_TRUE(Invalid(Run(o), "Gemm: bias"));
  Tensor bias_f16 = RandomTensor({6}, DType::kF16, 7);
  o.bias = &bias_f16.view();
  EXPECT_TRUE(Invalid(
      Run(o), "Gemm: bias has dtype f16, expected bf16 (the dtype of the operands) or f32"));
  Tensor bias_2d = RandomTensor({1, 6}, DType::kBF16, 8);
  o.bias = &bias_2d.view();
  EXPECT_TRUE(Invalid(Run(o), "Gemm: bias"));
  TensorView bias_gpu = bias_.view();
  bias_gpu.device = Device::Cuda(0);
  o.bias = &bias_gpu;
  EXPECT_TRUE(Invalid(Run(o), "Gemm: bias is on cuda:0, expected cpu (the device of C)"));
  Tensor wide = RandomTensor({2, 6}, DType::kBF16, 9);
  TensorView strided = wide.view();  // Column 0 of [2, 6] viewed as [6] with stride 6: not packed.
  strided.shape = {6};
  strided.strides = {6};
  o.bias = &strided;
  EXPECT_TRUE(Invalid(Run(o), "must be contiguous"));
  TensorView bias_in_c(c_.data(), {6}, DType::kBF16);
  o.bias = &bias_in_c;
  EXPECT_TRUE(Invalid(Run(o), "Gemm: bias overlaps C"));
}

TEST_F(GemmEpilogueArgumentsTest, BadPreActivationsAreInvalidArgument) {
  GemmOptions o = ok_;
  Tensor pre_small = RandomTensor({3, 5}, DType::kBF16, 10);
  o.pre_activation = &pre_small.view();
  EXPECT_TRUE(Invalid(Run(o), "Gemm: pre_activation"));
  Tensor pre_f32 = RandomTensor({3, 6}, DType::kF32, 11);
  o.pre_activation = &pre_f32.view();
  EXPECT_TRUE(
      Invalid(Run(o), "Gemm: pre_activation has dtype f32, expected bf16 (the dtype of C)"));
  o.pre_activation = &c_.view();
  EXPECT_TRUE(Invalid(Run(o), "Gemm: pre_activation overlaps C"));
  TensorView pre_in_a(a_.data(), {3, 2}, DType::kBF16);
  Tensor b2 = RandomTensor({4, 2}, DType::kBF16, 12);
  Tensor c2 = RandomTensor({3, 2}, DType::kBF16, 13);
  Tensor bias2 = RandomTensor({2}, DType::kBF16, 14);
  o.bias = &bias2.view();
  o.pre_activation = &pre_in_a;
  EXPECT_TRUE(Invalid(Gemm(ExecContext{}, a_.view(), b2.view(), c2.view(), o),
                      "Gemm: pre_activation overlaps A"));
  Tensor b41 = RandomTensor({4, 1}, DType::kBF16, 16);
  Tensor bias1 = RandomTensor({1}, DType::kBF16, 17);
  Tensor a14 = RandomTensor({1, 4}, DType::kBF16, 18);
  Tensor c1 = RandomTensor({1, 1}, DType::kBF16, 19);
  o.bias = &bias1.view();
  TensorView pre_on_bias(bias1.data(), {1, 1}, DType::kBF16);
  o.pre_activation = &pre_on_bias;
  EXPECT_TRUE(Invalid(Gemm(ExecContext{}, a14.view(), b41.view(), c1.view(), o),
                      "Gemm: pre_activation overlaps bias"));
}

}  // namespace
}  // namespace ops
}  // namespace mt
