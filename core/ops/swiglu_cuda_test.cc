// SwiGlu and SwiGluBackward on the GPU against the CPU backend at odd sizes in every dtype, with
// gates deep in both tails of the sigmoid, and with outputs over their inputs. Skipped without a
// GPU.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/ops/cuda_testutil.h"
#include "core/ops/swiglu.h"
#include "core/ops/testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace ops {
namespace {

using ::mt::testing::AllClose;
using ::mt::testing::CudaOpTest;
using ::mt::testing::EmptyDevice;
using ::mt::testing::RandomTensor;
using ::mt::testing::SameBits;
using ::mt::testing::ToDevice;
using ::mt::testing::ToDoubles;
using ::mt::testing::ToHost;
using ::mt::testing::UnitRoundoff;

const double kU32 = UnitRoundoff(DType::kF32);

// expf differs between the GPU and the host by a few ulps, so each f32 result by a few ulps of
// its own size; a 16-bit result may then round to a neighbour (2 u), or by an f16 subnormal step.
::testing::AssertionResult Close(const Tensor& gpu, const Tensor& cpu) {
  const double u = cpu.dtype() == DType::kF32 ? 0.0 : UnitRoundoff(cpu.dtype());
  return AllClose(ToHost(gpu.view()).view(), ToDoubles(cpu.view()), 2 * u + 16 * kU32,
                  cpu.dtype() == DType::kF16 ? std::ldexp(1.0, -24) : 1e-30);
}

using SwiGluCudaTest = CudaOpTest;

TEST_F(SwiGluCudaTest, ForwardAndBackwardMatchCpu) {
  uint64_t seed = 1;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (const Shape& shape : {Shape{1}, Shape{3, 17}, Shape{2, 5, 129}, Shape{3, 100003}}) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dt), ShapeToString(shape)));
      Tensor gate = RandomTensor(shape, dt, seed++, -12.0, 12.0);
      Tensor up = RandomTensor(shape, dt, seed++, -2.0, 2.0);
      Tensor dy = RandomTensor(shape, dt, seed++);
      Tensor g_dev = ToDevice(gate), u_dev = ToDevice(up), dy_dev = ToDevice(dy);
      Tensor y_cpu = Tensor::Host(shape, dt), y_dev = EmptyDevice(shape, dt);
      ASSERT_TRUE(SwiGlu(cpu_, gate.view(), up.view(), y_cpu.view()).ok());
      absl::Status s = SwiGlu(gpu_, g_dev.view(), u_dev.view(), y_dev.view());
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_TRUE(Close(y_dev, y_cpu)) << "SwiGlu";

      Tensor dg_cpu = Tensor::Host(shape, dt), du_cpu = Tensor::Host(shape, dt);
      Tensor dg_dev = EmptyDevice(shape, dt), du_dev = EmptyDevice(shape, dt);
      ASSERT_TRUE(
          SwiGluBackward(cpu_, gate.view(), up.view(), dy.view(), dg_cpu.view(), du_cpu.view())
              .ok());
      s = SwiGluBackward(gpu_, g_dev.view(), u_dev.view(), dy_dev.view(), dg_dev.view(),
                         du_dev.view());
      ASSERT_TRUE(s.ok()) << s;
      // dgate's bracket 1 + g (1 - s) loses up to |g| u32 absolutely where s is near 1.
      EXPECT_TRUE(AllClose(ToHost(dg_dev.view()).view(), ToDoubles(dg_cpu.view()),
                           dt == DType::kF32 ? 16 * kU32 : 2 * UnitRoundoff(dt) + 16 * kU32,
                           64 * kU32))
          << "dgate";
      EXPECT_TRUE(Close(du_dev, du_cpu)) << "dup";

      // Outputs over inputs: y over gate; dgate over dy and dup over up.
      ASSERT_TRUE(SwiGlu(gpu_, g_dev.view(), u_dev.view(), g_dev.view()).ok());
      EXPECT_TRUE(SameBits(ToHost(g_dev.view()).view(), ToHost(y_dev.view()).view()));
      Tensor g2 = ToDevice(gate);
      ASSERT_TRUE(
          SwiGluBackward(gpu_, g2.view(), u_dev.view(), dy_dev.view(), dy_dev.view(), u_dev.view())
              .ok());
      EXPECT_TRUE(SameBits(ToHost(dy_dev.view()).view(), ToHost(dg_dev.view()).view()));
      EXPECT_TRUE(SameBits(ToHost(u_dev.view()).view(), ToHost(du_dev.view()).view()));
    }
  }
}

}  // namespace
}  // namespace ops
}  // namespace mt
