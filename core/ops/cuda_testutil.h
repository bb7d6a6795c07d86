// Test helpers for the CUDA backend of the ops: tensors mirrored on the host and on cuda:0, a
// fixture that skips without a GPU and runs one op on both backends, and comparisons of the GPU's
// results with the CPU backend's within a tolerance derived from the output dtype. testonly.
//
//   using ElementwiseCudaTest = CudaOpTest;
//   TEST_F(ElementwiseCudaTest, GeluMatchesCpu) {
//     const Mirrored x = Mirror(RandomTensor(shape, dt, seed));
//     const Mirrored y = MirrorNaN(shape, dt);
//     EXPECT_TRUE(OnBothMatch(y, Tolerance{32 * kU32, 32 * kU32},
//                             [&](const ExecContext& c, Side s) { return Gelu(c, x[s], y[s]); }));
//   }
//
// Errors: a failed copy or allocation is recorded as a (non-fatal) test failure that names the
// call and the status, never a crash: the helpers then return an empty tensor (on the device) or
// a NaN-filled one (on the host), so the test goes on to fail its own checks or ASSERTs.
#ifndef MT_CORE_OPS_CUDA_TESTUTIL_H_
#define MT_CORE_OPS_CUDA_TESTUTIL_H_

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/cuda/device_context.h"
#include "core/cuda_device.h"
#include "core/exec_context.h"
#include "core/ops/testutil.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"

namespace mt {
namespace testing {

// A copy of a host tensor on cuda:`device`, and of a device tensor (or view) on the host.
Tensor ToDevice(const TensorView& host, int device = 0);
Tensor ToDevice(const Tensor& host, int device = 0);
Tensor ToHost(const TensorView& device);
// An uninitialised tensor on cuda:`device`.
Tensor EmptyDevice(Shape shape, DType dtype, int device = 0);

// The two backends of a comparison.
enum class Side { kCpu, kGpu };

// A tensor on both sides of a comparison: a host tensor for the CPU backend and a tensor on cuda:0
// for the CUDA backend, which start with the same contents. Move-only.
class Mirrored {
 public:
  Mirrored() = default;
  // `host` becomes the CPU side; the GPU side is a copy of it.
  explicit Mirrored(Tensor host);

  // The view an op on `side` reads or writes (stable: a pointer to it may be kept).
  const TensorView& operator[](Side side) const;
  const Tensor& cpu() const { return cpu_; }
  const Tensor& gpu() const { return gpu_; }
  // The GPU side's current contents on the host.
  Tensor GpuToHost() const;

 private:
  Tensor cpu_, gpu_;
};

// A host tensor on both sides.
Mirrored Mirror(Tensor host);
// A copy of a host view on both sides.
Mirrored Mirror(const TensorView& host);
// An output of `shape` and `dtype` on both sides, every byte 0xFF (NaN; see NaNTensor), so that an
// element the op does not write shows up in the comparison.
Mirrored MirrorNaN(Shape shape, DType dtype);

// How far a GPU result may lie from the CPU backend's: |gpu - cpu| <= r |cpu| + abs elementwise,
// with r = rel + roundings u_out, where u_out is the unit roundoff of a 16-bit output dtype (each
// side may round its f32 result to it differently) and 0 for f32 and integer outputs (whose
// differences `rel` and `abs` must cover). NaN never matches. bitwise: the bits must be equal.
struct Tolerance {
  double rel = 0;
  double abs = 0;
  int roundings = 2;
  bool bitwise = false;
};
inline constexpr Tolerance kBitwise{0, 0, 0, true};

// The GPU side of `t` against its CPU side; or a device view against a host view of the same
// dtype and shape.
::testing::AssertionResult GpuMatchesCpu(const Mirrored& t, const Tolerance& tol);
::testing::AssertionResult GpuMatchesCpu(const TensorView& gpu, const TensorView& cpu,
                                         const Tolerance& tol);
// |gpu[i] - cpu[i]| <= bound[i] for every i (see WithinBounds).
::testing::AssertionResult GpuWithinBounds(const TensorView& gpu, const TensorView& cpu,
                                           const std::vector<double>& bound);

// A fixture base for tests that need cuda:0: SetUp skips (naming why) without a GPU and fails if
// the DeviceContext cannot be made; gpu_ then runs on cuda:0, cpu_ on the calling thread. Base is
// ::testing::Test or ::testing::TestWithParam<P>:
//   class AllocCudaTest : public GpuTest<> {};
//   class StoreCudaTest : public GpuTest<::testing::TestWithParam<DType>> {};
template <typename Base = ::testing::Test>
class GpuTest : public Base {
 protected:
  void SetUp() override {
    if (cuda::DeviceCount() == 0) GTEST_SKIP() << cuda::Describe();
    absl::StatusOr<std::unique_ptr<cuda::DeviceContext>> dc = cuda::DeviceContext::Create(0);
    ASSERT_TRUE(dc.ok()) << dc.status();
    dc_ = std::move(dc).value();
    gpu_.cuda = dc_.get();
    gpu_.device = Device::Cuda(0);
  }

  ExecContext cpu_;
  ExecContext gpu_;
  std::unique_ptr<cuda::DeviceContext> dc_;
};

// Runs each test with a GPU: skips (naming why) when there is none. gpu_ runs ops on cuda:0 with a
// DeviceContext; cpu_ runs the reference CPU backend on a pool of three threads.
class CudaOpTest : public ::testing::Test {
 protected:
  using Op = std::function<absl::Status(const ExecContext& ctx, Side side)>;

  void SetUp() override;

  // Runs op(cpu_, Side::kCpu), then op(gpu_, Side::kGpu). Fails (naming the side and the status)
  // as soon as one of them returns an error.
  ::testing::AssertionResult OnBoth(const Op& op) const;
  // OnBoth(op), then GpuMatchesCpu(out, tol): `op` writes `out` on each side.
  ::testing::AssertionResult OnBothMatch(const Mirrored& out, const Tolerance& tol,
                                         const Op& op) const;
  const ExecContext& ctx(Side side) const { return side == Side::kCpu ? cpu_ : gpu_; }

  ThreadPool pool_{3};
  ExecContext cpu_{&pool_};
  ExecContext gpu_;
  std::unique_ptr<cuda::DeviceContext> device_context_;
};

}  // namespace testing
}  // namespace mt

#endif  // MT_CORE_OPS_CUDA_TESTUTIL_H_
