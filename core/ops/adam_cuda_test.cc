// Adam / AdamW on the GPU against the CPU backend over several steps: the kernel performs the same
// f32 roundings in the same order (no fused multiply-adds), so parameters and moments agree to a
// few ulps at most. Skipped without a GPU.
#include "absl/strings/str_cat.h"
#include "core/ops/adam.h"
#include "core/ops/cuda_testutil.h"
#include "core/ops/testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::CudaOpTest;
using ::mt::testing::GpuMatchesCpu;
using ::mt::testing::MaxAbs;
using ::mt::testing::Mirror;
using ::mt::testing::Mirrored;
using ::mt::testing::RandomTensor;
using ::mt::testing::Side;
using ::mt::testing::ToDoubles;
using ::mt::testing::Tolerance;
using ::mt::testing::UnitRoundoff;

using AdamCudaTest = CudaOpTest;

TEST_F(AdamCudaTest, StepsMatchCpu) {
  const double u = UnitRoundoff(DType::kF32);
  uint64_t seed = 1;
  for (WeightDecayMode mode : {WeightDecayMode::kAdamW, WeightDecayMode::kAdamL2}) {
    for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{129}, int64_t{100003}}) {
      SCOPED_TRACE(absl::StrCat(mode == WeightDecayMode::kAdamW ? "AdamW" : "AdamL2", " n ", n));
      const Mirrored p = Mirror(RandomTensor({n}, DType::kF32, seed++));
      const Mirrored m = Mirror(Tensor::Zeros({n}, DType::kF32));
      const Mirrored v = Mirror(Tensor::Zeros({n}, DType::kF32));
      AdamArgs args;
      args.lr = 3e-3f;
      args.weight_decay = 0.01f;
      args.mode = mode;
      args.grad_scale = 0.5f;
      for (int64_t step = 1; step <= 5; ++step) {
        args.step = step;
        const Mirrored g = Mirror(RandomTensor({n}, DType::kF32, seed++, -2.0, 2.0));
        ASSERT_TRUE(OnBoth([&](const ExecContext& c, Side s) {
          return AdamUpdate(c, p[s], g[s], m[s], v[s], args);
        }));
      }
      const double p_max = MaxAbs(ToDoubles(p.cpu().view()));
      EXPECT_TRUE(GpuMatchesCpu(m, Tolerance{8 * u, 1e-30}));
      EXPECT_TRUE(GpuMatchesCpu(v, Tolerance{8 * u, 1e-30}));
      EXPECT_TRUE(GpuMatchesCpu(p, Tolerance{8 * u, 8 * u * p_max}));
    }
  }
}

}  // namespace
}  // namespace ops
}  // namespace mt
