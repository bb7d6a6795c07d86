#include "core/cuda/device_context.h"

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "core/cuda_device.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt {
namespace cuda {
namespace {

using ::testing::HasSubstr;

// Without a device (or without CUDA), Create says why instead of failing later.
TEST(DeviceContextTest, CreateFailsClearlyWithoutThatDevice) {
  const int count = DeviceCount();
  absl::StatusOr<std::unique_ptr<DeviceContext>> dc = DeviceContext::Create(count);
  ASSERT_FALSE(dc.ok());
  if (BuiltWithCuda()) {
    EXPECT_EQ(dc.status().code(), absl::StatusCode::kFailedPrecondition) << dc.status();
    EXPECT_THAT(std::string(dc.status().message()), HasSubstr("does not exist")) << dc.status();
  } else {
    EXPECT_EQ(dc.status().code(), absl::StatusCode::kUnimplemented) << dc.status();
    EXPECT_THAT(std::string(dc.status().message()), HasSubstr("built without CUDA"));
  }
  EXPECT_FALSE(DeviceContext::Create(-1).ok());
}

TEST(DeviceContextTest, CreatesOnEveryDevice) {
  if (DeviceCount() == 0) GTEST_SKIP() << Describe();
  for (int d = 0; d < DeviceCount(); ++d) {
    absl::StatusOr<std::unique_ptr<DeviceContext>> dc = DeviceContext::Create(d);
    ASSERT_TRUE(dc.ok()) << dc.status();
    EXPECT_EQ((*dc)->device(), d);
    EXPECT_EQ((*dc)->gemm_plans(), 0u);
    EXPECT_EQ((*dc)->scratch_bytes(), 0u);  // Scratch is allocated on first use.
  }
  DeviceContext::Options small;
  small.gemm_workspace_bytes = 0;  // cuBLASLt then picks workspace-free algorithms.
  EXPECT_TRUE(DeviceContext::Create(0, small).ok());
}

}  // namespace
}  // namespace cuda
}  // namespace mt
