// Test helpers for the CUDA backend of the ops: host <-> device copies, a fixture that skips
// without a GPU and provides a CPU and a GPU ExecContext, and comparisons of GPU results with the
// CPU backend's. testonly.
#ifndef MT_CORE_OPS_CUDA_TESTUTIL_H_
#define MT_CORE_OPS_CUDA_TESTUTIL_H_

#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "core/cuda/device_context.h"
#include "core/exec_context.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace mt {
namespace testing {

// A copy of a host tensor on cuda:0, and of a device tensor (or view) on the host. CHECK-fail on
// CUDA errors (tests only).
Tensor ToDevice(const Tensor& host);
Tensor ToHost(const TensorView& device);
// An uninitialised tensor on cuda:0.
Tensor EmptyDevice(Shape shape, DType dtype);

// Bitwise equality of two host views (same dtype and shape).
::testing::AssertionResult SameBits(const TensorView& actual, const TensorView& expected);

// Passes iff |actual[i] - expected[i]| <= bound[i] for every i (NaNs fail); names the worst.
::testing::AssertionResult WithinBounds(const TensorView& actual, const TensorView& expected,
                                        const std::vector<double>& bound);

// Runs each test with a GPU: skips (naming why) when there is none. gpu_ runs ops on cuda:0 with a
// DeviceContext; cpu_ runs the reference CPU backend on a pool of three threads.
class CudaOpTest : public ::testing::Test {
 protected:
  void SetUp() override;

  ThreadPool pool_{3};
  ExecContext cpu_{&pool_};
  ExecContext gpu_;
  std::unique_ptr<cuda::DeviceContext> device_context_;
};

}  // namespace testing
}  // namespace mt

#endif  // MT_CORE_OPS_CUDA_TESTUTIL_H_
