// CpuGemmBackend::kPacked beyond the sweeps every backend runs in gemm_test (odd sizes up to 130,
// which stay inside one of its cache blocks, at the CPU's best SIMD target): products that cross
// every block boundary (rows past one 144-row block, columns past one 3,072-column block, K past
// one 384-deep block, with partial tiles at each edge) against the float64 reference with both
// kernels (AVX2, and AVX-512 where the CPU has it), the same bits for every thread count and
// either kernel, and the fixed rule that sends bf16 to it.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cpu_features.h"
#include "core/cpu_features_testutil.h"
#include "core/ops/gemm.h"
#include "core/ops/gemm_testutil.h"
#include "core/ops/testutil.h"
#include "core/simd.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::GemmCase;
using ::mt::testing::GemmReference;
using ::mt::testing::RandomTensor;
using ::mt::testing::ToDoubles;
using ::mt::testing::UnitRoundoff;

// Columns past one column block and rows past one row block (split over C's columns: N > M),
// and the other way round (split over rows); both with K past one K block and every edge partial.
constexpr int64_t kShapes[][3] = {{151, 3090, 389}, {3100, 37, 770}};

GemmCase Case(int64_t m, int64_t n, int64_t k, Transpose ta, Transpose tb, DType dtype, float alpha,
              float beta, uint64_t seed) {
  GemmCase cs;
  cs.m = m;
  cs.n = n;
  cs.k = k;
  cs.ta = ta;
  cs.tb = tb;
  cs.alpha = alpha;
  cs.beta = beta;
  cs.dtype = dtype;
  cs.c_dtype = DType::kF32;
  cs.backend = CpuGemmBackend::kPacked;
  cs.seed = seed;
  return cs;
}

// C (f32) after the product on `pool`, with A and B in `a_dtype` / `b_dtype` drawn from the seed.
std::vector<float> Product(const GemmCase& cs, DType a_dtype, DType b_dtype, ThreadPool* pool,
                           GemmReference* ref) {
  Tensor a = RandomTensor(cs.AShape(), a_dtype, 3 * cs.seed + 1);
  Tensor b = RandomTensor(cs.BShape(), b_dtype, 3 * cs.seed + 2);
  Tensor c = RandomTensor(cs.CShape(), DType::kF32, 3 * cs.seed + 3);
  if (ref != nullptr) {
    *ref = ::mt::testing::ReferenceGemm(cs, ToDoubles(a.view()), ToDoubles(b.view()),
                                        ToDoubles(c.view()));
  }
  ExecContext ctx;
  ctx.pool = pool;
  const absl::Status status = Gemm(ctx, a.view(), b.view(), c.view(), cs.Options());
  EXPECT_TRUE(status.ok()) << status;
  std::vector<float> out(c.numel());
  std::memcpy(out.data(), c.view().data, out.size() * sizeof(float));
  return out;
}

// The SIMD targets that pick the packed GEMM's kernels: AVX2, and the first AVX-512 one (AVX3...)
// where this CPU has it.
std::vector<SimdTarget> KernelTargets() {
  std::vector<SimdTarget> out;
  bool avx3 = false;
  for (const SimdTarget& t : SimdTargets()) {
    if (t.name == "AVX2") out.push_back(t);
    if (!avx3 && t.name.rfind("AVX3", 0) == 0) {
      out.push_back(t);
      avx3 = true;
    }
  }
  return out;
}

class PackedGemmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!PackedGemmAvailable()) GTEST_SKIP() << "this CPU has no AVX2 and FMA";
  }
};

// Every block boundary, all transposes, alpha/beta; bf16, f32 and bf16 beside f32 operands; with
// each kernel (the float64 reference, the costly part, computed once per case).
TEST_F(PackedGemmTest, CrossesEveryBlockWithinF32Bounds) {
  ThreadPool pool(2);
  const struct {
    DType a, b;
  } operands[] = {
      {DType::kBF16, DType::kBF16}, {DType::kF32, DType::kF32}, {DType::kBF16, DType::kF32}};
  const std::vector<SimdTarget> targets = KernelTargets();
  uint64_t seed = 0;
  for (const auto& shape : kShapes) {
    for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
      for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
        const auto& op = operands[seed % 3];
        const float* ab = ::mt::testing::kAlphaBeta[seed % 4];
        const DType half = op.a == DType::kF32 ? op.b : op.a;
        const GemmCase cs = Case(shape[0], shape[1], shape[2], ta, tb, half, ab[0], ab[1], ++seed);
        // f32 accumulation over K terms (statistical bound for random signs): no 16-bit rounding
        // of an f32 C.
        const double rel =
            4.0 * std::sqrt(static_cast<double>(cs.k) + 2.0) * UnitRoundoff(DType::kF32);
        GemmReference ref;
        std::vector<double> bound;
        for (const SimdTarget& target : targets) {
          ScopedSimdTarget scoped(target);
          SCOPED_TRACE(absl::StrCat(target.name, " ", cs.ToString(), " A ", DTypeName(op.a), " B ",
                                    DTypeName(op.b)));
          const std::vector<float> got =
              Product(cs, op.a, op.b, &pool, bound.empty() ? &ref : nullptr);
          if (bound.empty()) {
            bound.resize(ref.magnitude.size());
            for (size_t i = 0; i < bound.size(); ++i) bound[i] = rel * ref.magnitude[i];
          }
          std::vector<double> actual(got.begin(), got.end());
          EXPECT_TRUE(::mt::testing::WithinBounds(actual, ref.value, bound));
        }
      }
    }
  }
}

// Each C element is summed in one fixed order whatever range of C a thread owns, and in the same
// order by both kernels (they share the K blocking).
TEST_F(PackedGemmTest, SameBitsForEveryThreadCountAndKernel) {
  ThreadPool two(2), three(3);
  const std::vector<SimdTarget> targets = KernelTargets();
  for (const auto& shape : kShapes) {
    const GemmCase cs = Case(shape[0], shape[1], shape[2], Transpose::kNo, Transpose::kYes,
                             DType::kBF16, -0.75f, 0.5f, 77);
    const std::vector<float> serial = Product(cs, DType::kBF16, DType::kBF16, nullptr, nullptr);
    for (const SimdTarget& target : targets) {
      ScopedSimdTarget scoped(target);
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two, &three}) {
        const std::vector<float> split = Product(cs, DType::kBF16, DType::kBF16, pool, nullptr);
        ASSERT_EQ(std::memcmp(serial.data(), split.data(), serial.size() * sizeof(float)), 0)
            << cs.ToString() << " at " << target.name << " on "
            << (pool == nullptr ? 1 : pool->num_threads()) << " threads";
      }
    }
  }
}

// bf16 without bf16 instructions goes to the packed GEMM on CPUs with AVX2 and FMA (with AVX-512
// or without), to OpenBLAS without them; f32 and f16 never.
TEST(PackedGemmRuleTest, Bf16WithoutBf16Instructions) {
  CpuFeatures f = ::mt::testing::Avx512CpuFeatures();
  EXPECT_EQ(DefaultCpuGemmBackend(DType::kBF16, f), CpuGemmBackend::kPacked);
  f.avx512_bf16 = true;
  EXPECT_EQ(DefaultCpuGemmBackend(DType::kBF16, f), CpuGemmBackend::kOneDnn);
  f.avx512_bf16 = false;
  f.os_zmm = false;  // AVX-512 not enabled by the OS: an AVX2 machine.
  EXPECT_EQ(DefaultCpuGemmBackend(DType::kBF16, f), CpuGemmBackend::kPacked);
  EXPECT_EQ(DefaultCpuGemmBackend(DType::kF32, f), CpuGemmBackend::kOpenBlas);
  EXPECT_EQ(DefaultCpuGemmBackend(DType::kF16, f), CpuGemmBackend::kOpenBlas);
  f.fma = false;
  EXPECT_EQ(DefaultCpuGemmBackend(DType::kBF16, f), CpuGemmBackend::kOpenBlas);
}

// In this process: where kDefault's bf16 does not go to oneDNN (ONEDNN_MAX_CPU_ISA=AVX2 in the
// gemm_packed_avx2_test variant), it goes to the packed GEMM, and the start-up line says so.
TEST(PackedGemmRuleTest, ProcessRouteWithoutOneDnnBf16Kernel) {
  const CpuGemmBackend route = ResolveCpuGemmBackend(CpuGemmBackend::kDefault, DType::kBF16);
  if (route == CpuGemmBackend::kOneDnn) GTEST_SKIP() << "bf16 runs on oneDNN's bf16 kernel here";
  EXPECT_EQ(route, PackedGemmAvailable() ? CpuGemmBackend::kPacked : CpuGemmBackend::kOpenBlas);
  EXPECT_NE(DescribeCpuGemm().find(route == CpuGemmBackend::kPacked
                                       ? "bf16: packed, widened to f32 while packed"
                                       : "bf16: openblas, widened to f32"),
            std::string::npos)
      << DescribeCpuGemm();
}

}  // namespace
}  // namespace ops
}  // namespace mt
