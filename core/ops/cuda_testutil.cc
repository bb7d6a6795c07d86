#include "core/ops/cuda_testutil.h"

#include <cmath>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/cuda_device.h"
#include "glog/logging.h"

namespace mt {
namespace testing {

namespace {
bool IsHalf(DType dtype) { return dtype == DType::kBF16 || dtype == DType::kF16; }
}  // namespace

Tensor ToDevice(const TensorView& host, int device) {
  CHECK(host.device.is_cpu() && host.IsContiguous()) << "ToDevice of " << host.DebugString();
  Tensor t = EmptyDevice(host.shape, host.dtype, device);
  if (t.empty() || host.nbytes() == 0) return t;
  const absl::Status s =
      cuda::Memcpy(t.data(), host.data, host.nbytes(), cuda::CopyKind::kHostToDevice);
  if (!s.ok()) {
    ADD_FAILURE() << "ToDevice: copying " << host.DebugString() << " to cuda:" << device
                  << " failed: " << s;
    return Tensor();
  }
  return t;
}

Tensor ToDevice(const Tensor& host, int device) { return ToDevice(host.view(), device); }

Tensor ToHost(const TensorView& device) {
  Tensor t = NaNTensor(device.shape, device.dtype);
  if (t.nbytes() == 0) return t;
  const absl::Status s =
      cuda::Memcpy(t.data(), device.data, t.nbytes(), cuda::CopyKind::kDeviceToHost);
  if (!s.ok()) {
    ADD_FAILURE() << "ToHost: copying " << device.DebugString() << " to the host failed: " << s;
    return NaNTensor(device.shape, device.dtype);
  }
  return t;
}

Tensor EmptyDevice(Shape shape, DType dtype, int device) {
  const Shape requested = shape;
  absl::StatusOr<Tensor> t = Tensor::Empty(std::move(shape), dtype, Device::Cuda(device));
  if (!t.ok()) {
    ADD_FAILURE() << "EmptyDevice: allocating " << DTypeName(dtype) << ShapeToString(requested)
                  << " on cuda:" << device << " failed: " << t.status();
    return Tensor();
  }
  return std::move(t).value();
}

Mirrored::Mirrored(Tensor host) : cpu_(std::move(host)), gpu_(ToDevice(cpu_)) {}

const TensorView& Mirrored::operator[](Side side) const {
  return side == Side::kCpu ? cpu_.view() : gpu_.view();
}

Tensor Mirrored::GpuToHost() const { return ToHost(gpu_.view()); }

Mirrored Mirror(Tensor host) { return Mirrored(std::move(host)); }

Mirrored Mirror(const TensorView& host) {
  CHECK(host.device.is_cpu() && host.IsContiguous()) << "Mirror of " << host.DebugString();
  Tensor copy = Tensor::Host(host.shape, host.dtype);
  if (copy.nbytes() > 0) std::memcpy(copy.data(), host.data, copy.nbytes());
  return Mirrored(std::move(copy));
}

Mirrored MirrorNaN(Shape shape, DType dtype) {
  return Mirrored(NaNTensor(std::move(shape), dtype));
}

::testing::AssertionResult GpuMatchesCpu(const TensorView& gpu, const TensorView& cpu,
                                         const Tolerance& tol) {
  const Tensor actual = ToHost(gpu);
  if (tol.bitwise) return SameBits(actual.view(), cpu);
  if (actual.dtype() != cpu.dtype || actual.shape() != cpu.shape) {
    return ::testing::AssertionFailure()
           << "GPU " << gpu.DebugString() << " vs CPU " << cpu.DebugString();
  }
  const double u_out = IsHalf(cpu.dtype) ? UnitRoundoff(cpu.dtype) : 0.0;
  return AllClose(actual.view(), ToDoubles(cpu), tol.rel + tol.roundings * u_out, tol.abs);
}

::testing::AssertionResult GpuMatchesCpu(const Mirrored& t, const Tolerance& tol) {
  return GpuMatchesCpu(t[Side::kGpu], t[Side::kCpu], tol);
}

::testing::AssertionResult GpuWithinBounds(const TensorView& gpu, const TensorView& cpu,
                                           const std::vector<double>& bound) {
  return WithinBounds(ToHost(gpu).view(), cpu, bound);
}

void CudaOpTest::SetUp() {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << cuda::Describe();
  absl::StatusOr<std::unique_ptr<cuda::DeviceContext>> dc = cuda::DeviceContext::Create(0);
  ASSERT_TRUE(dc.ok()) << dc.status();
  device_context_ = std::move(dc).value();
  gpu_.cuda = device_context_.get();
}

::testing::AssertionResult CudaOpTest::OnBoth(const Op& op) const {
  for (Side side : {Side::kCpu, Side::kGpu}) {
    const absl::Status s = op(ctx(side), side);
    if (!s.ok()) {
      return ::testing::AssertionFailure()
             << "the op failed on " << (side == Side::kCpu ? "the CPU" : "cuda:0") << ": " << s;
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult CudaOpTest::OnBothMatch(const Mirrored& out, const Tolerance& tol,
                                                   const Op& op) const {
  ::testing::AssertionResult ran = OnBoth(op);
  if (!ran) return ran;
  return GpuMatchesCpu(out, tol);
}

}  // namespace testing
}  // namespace mt
