// The CUDA test helpers report what goes wrong as test failures (naming the call and the status),
// never by crashing the test binary: a failed allocation or copy, an op that fails on one side,
// and results that differ. The cases without a fixture run everywhere; the fixture's skip without
// a GPU.
#include "core/ops/cuda_testutil.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/cuda_device.h"
#include "core/ops/testutil.h"
#include "gmock/gmock.h"
#include "gtest/gtest-spi.h"
#include "gtest/gtest.h"

namespace mt {
namespace testing {
namespace {

using ::testing::HasSubstr;

TEST(CudaTestutilTest, AFailedAllocationIsATestFailure) {
  Tensor t;
  EXPECT_NONFATAL_FAILURE(t = EmptyDevice({2, -1}, DType::kF32),
                          "EmptyDevice: allocating f32[2, -1] on cuda:0 failed: INVALID_ARGUMENT");
  EXPECT_TRUE(t.empty());
}

TEST(CudaTestutilTest, CopiesWithoutADeviceAreTestFailures) {
  if (cuda::DeviceCount() > 0) GTEST_SKIP() << "needs a machine without a CUDA device";
  const Tensor host = RandomTensor({3}, DType::kF32, 1);
  Tensor dev;
  EXPECT_NONFATAL_FAILURE(dev = ToDevice(host), "EmptyDevice: allocating f32[3] on cuda:0 failed");
  EXPECT_TRUE(dev.empty());
  Mirrored m;
  EXPECT_NONFATAL_FAILURE(m = Mirror(host.view()), "on cuda:0 failed");
  EXPECT_TRUE(SameBits(m.cpu(), host));  // The CPU side is still usable.
  // Host memory labelled cuda:0: the copy back fails; the result is NaN, not garbage.
  TensorView fake = host.view();
  fake.device = Device::Cuda(0);
  Tensor back;
  EXPECT_NONFATAL_FAILURE(back = ToHost(fake),
                          "ToHost: copying f32[3] on cuda:0 to the host failed");
  for (double v : ToDoubles(back.view())) EXPECT_TRUE(std::isnan(v));
}

using CudaOpTestTest = CudaOpTest;

TEST_F(CudaOpTestTest, AnOpFailingOnOneSideIsReportedWithItsSideAndStatus) {
  const ::testing::AssertionResult r = OnBoth([](const ExecContext&, Side s) {
    return s == Side::kGpu ? absl::InternalError("MyOp: boom") : absl::OkStatus();
  });
  EXPECT_FALSE(r);
  EXPECT_THAT(r.message(), HasSubstr("the op failed on cuda:0: INTERNAL: MyOp: boom"));
  const Mirrored y = MirrorNaN({3}, DType::kF32);
  const ::testing::AssertionResult cpu_fails =
      OnBothMatch(y, kBitwise, [](const ExecContext&, Side s) {
        return s == Side::kCpu ? absl::InvalidArgumentError("MyOp: bad x") : absl::OkStatus();
      });
  EXPECT_FALSE(cpu_fails);
  EXPECT_THAT(cpu_fails.message(),
              HasSubstr("the op failed on the CPU: INVALID_ARGUMENT: MyOp: bad x"));
}

TEST_F(CudaOpTestTest, ComparisonsUseTheOutputDtypesRoundoff) {
  // GPU side 1 + 2^-9 against CPU 1: within bf16's two roundings (2 * 2^-8), not within f32's.
  const double x = 1.0 + std::ldexp(1.0, -9);
  const Mirrored one_bf16 = Mirror(FromDoubles({1}, DType::kBF16, {1.0}));
  const Tensor near_bf16 = ToDevice(FromDoubles({1}, DType::kF32, {x}));
  const Mirrored one_f32 = Mirror(FromDoubles({1}, DType::kF32, {1.0}));
  EXPECT_FALSE(GpuMatchesCpu(near_bf16.view(), one_f32[Side::kCpu], Tolerance{}));
  EXPECT_TRUE(GpuMatchesCpu(near_bf16.view(), one_f32[Side::kCpu], Tolerance{std::ldexp(1.0, -8)}));
  // A bf16 result one ulp (2^-7 at 1) off: within 2 u = 2^-7 relative of bf16.
  const Tensor next_bf16 = ToDevice(FromDoubles({1}, DType::kBF16, {1.0 + std::ldexp(1.0, -7)}));
  EXPECT_TRUE(GpuMatchesCpu(next_bf16.view(), one_bf16[Side::kCpu], Tolerance{}));
  EXPECT_FALSE(GpuMatchesCpu(next_bf16.view(), one_bf16[Side::kCpu], Tolerance{0, 0, 1}));
  // NaN never matches a tolerance, but has its bits.
  const Mirrored nan = MirrorNaN({2}, DType::kF16);
  EXPECT_FALSE(GpuMatchesCpu(nan, Tolerance{1, 1}));
  EXPECT_TRUE(GpuMatchesCpu(nan, kBitwise));
  // Shapes must agree.
  EXPECT_FALSE(GpuMatchesCpu(nan[Side::kGpu], one_f32[Side::kCpu], Tolerance{1, 1}));
}

}  // namespace
}  // namespace testing
}  // namespace mt
