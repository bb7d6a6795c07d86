// Adam / AdamW on the GPU against the CPU backend over several steps: the kernel performs the same
// f32 roundings in the same order (no fused multiply-adds), so parameters and moments agree to a
// few ulps at most. Skipped without a GPU.
#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "core/ops/adam.h"
#include "core/ops/cuda_testutil.h"
#include "core/ops/testutil.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::AllClose;
using ::mt::testing::CudaOpTest;
using ::mt::testing::RandomTensor;
using ::mt::testing::ToDevice;
using ::mt::testing::ToDoubles;
using ::mt::testing::ToHost;
using ::mt::testing::UnitRoundoff;

using AdamCudaTest = CudaOpTest;

TEST_F(AdamCudaTest, StepsMatchCpu) {
  const double u = UnitRoundoff(DType::kF32);
  uint64_t seed = 1;
  for (WeightDecayMode mode : {WeightDecayMode::kAdamW, WeightDecayMode::kAdamL2}) {
    for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{129}, int64_t{100003}}) {
      SCOPED_TRACE(absl::StrCat(mode == WeightDecayMode::kAdamW ? "AdamW" : "AdamL2", " n ", n));
      Tensor p = RandomTensor({n}, DType::kF32, seed++);
      Tensor m = Tensor::Zeros({n}, DType::kF32), v = Tensor::Zeros({n}, DType::kF32);
      Tensor p_dev = ToDevice(p), m_dev = ToDevice(m), v_dev = ToDevice(v);
      AdamArgs args;
      args.lr = 3e-3f;
      args.weight_decay = 0.01f;
      args.mode = mode;
      args.grad_scale = 0.5f;
      for (int64_t step = 1; step <= 5; ++step) {
        args.step = step;
        Tensor g = RandomTensor({n}, DType::kF32, seed++, -2.0, 2.0);
        Tensor g_dev = ToDevice(g);
        ASSERT_TRUE(AdamUpdate(cpu_, p.view(), g.view(), m.view(), v.view(), args).ok());
        const absl::Status s =
            AdamUpdate(gpu_, p_dev.view(), g_dev.view(), m_dev.view(), v_dev.view(), args);
        ASSERT_TRUE(s.ok()) << s;
      }
      double p_max = 0;
      for (double x : ToDoubles(p.view())) p_max = std::max(p_max, std::fabs(x));
      EXPECT_TRUE(AllClose(ToHost(m_dev.view()).view(), ToDoubles(m.view()), 8 * u, 1e-30));
      EXPECT_TRUE(AllClose(ToHost(v_dev.view()).view(), ToDoubles(v.view()), 8 * u, 1e-30));
      EXPECT_TRUE(AllClose(ToHost(p_dev.view()).view(), ToDoubles(p.view()), 8 * u, 8 * u * p_max));
    }
  }
}

}  // namespace
}  // namespace ops
}  // namespace mt
