#include "core/ops/cuda_testutil.h"

#include <cmath>
#include <cstring>

#include "absl/status/status.h"
#include "core/cuda_device.h"
#include "core/ops/testutil.h"
#include "glog/logging.h"

namespace mt {
namespace testing {

Tensor ToDevice(const Tensor& host) {
  absl::StatusOr<Tensor> t = Tensor::Empty(host.shape(), host.dtype(), Device::Cuda(0));
  CHECK(t.ok()) << t.status();
  if (host.nbytes() > 0) {
    const absl::Status s =
        cuda::Memcpy(t->data(), host.data(), host.nbytes(), cuda::CopyKind::kHostToDevice);
    CHECK(s.ok()) << s;
  }
  return std::move(t).value();
}

Tensor ToHost(const TensorView& device) {
  Tensor t = Tensor::Host(device.shape, device.dtype);
  if (t.nbytes() > 0) {
    const absl::Status s =
        cuda::Memcpy(t.data(), device.data, t.nbytes(), cuda::CopyKind::kDeviceToHost);
    CHECK(s.ok()) << s;
  }
  return t;
}

Tensor EmptyDevice(Shape shape, DType dtype) {
  absl::StatusOr<Tensor> t = Tensor::Empty(std::move(shape), dtype, Device::Cuda(0));
  CHECK(t.ok()) << t.status();
  return std::move(t).value();
}

::testing::AssertionResult SameBits(const TensorView& actual, const TensorView& expected) {
  if (actual.dtype != expected.dtype || actual.shape != expected.shape) {
    return ::testing::AssertionFailure()
           << actual.DebugString() << " vs expected " << expected.DebugString();
  }
  const size_t elem = DTypeSize(actual.dtype);
  const char* a = static_cast<const char*>(actual.data);
  const char* e = static_cast<const char*>(expected.data);
  for (int64_t i = 0; i < actual.numel(); ++i) {
    if (std::memcmp(a + i * elem, e + i * elem, elem) != 0) {
      const std::vector<double> av = ToDoubles(actual), ev = ToDoubles(expected);
      return ::testing::AssertionFailure() << "element " << i << " of " << actual.numel()
                                           << " differs: " << av[i] << " vs expected " << ev[i];
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult WithinBounds(const TensorView& actual, const TensorView& expected,
                                        const std::vector<double>& bound) {
  const std::vector<double> a = ToDoubles(actual), e = ToDoubles(expected);
  if (a.size() != e.size() || a.size() != bound.size()) {
    return ::testing::AssertionFailure() << "sizes differ: " << a.size() << ", " << e.size()
                                         << ", " << bound.size();
  }
  int64_t bad = 0, worst = -1;
  double worst_ratio = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double err = std::fabs(a[i] - e[i]);
    if (!(err <= bound[i])) {
      ++bad;
      const double ratio = std::isnan(err) ? INFINITY : err / bound[i];
      if (worst < 0 || ratio > worst_ratio) {
        worst = static_cast<int64_t>(i);
        worst_ratio = ratio;
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << a.size() << " elements outside their bounds; worst at " << worst
         << ": actual " << a[worst] << ", expected " << e[worst] << ", bound " << bound[worst];
}

void CudaOpTest::SetUp() {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << cuda::Describe();
  absl::StatusOr<std::unique_ptr<cuda::DeviceContext>> dc = cuda::DeviceContext::Create(0);
  ASSERT_TRUE(dc.ok()) << dc.status();
  device_context_ = std::move(dc).value();
  gpu_.cuda = device_context_.get();
}

}  // namespace testing
}  // namespace mt
