// ParameterStore on a device: offsets, host copies for checkpoints, ZeroGrads(ctx), and (with a
// GPU) a CUDA store holding bit for bit the CPU store's values and compute copies. The CPU cases
// run everywhere; the CUDA ones skip without a GPU.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/alloc.h"
#include "core/cuda/device_context.h"
#include "core/cuda_device.h"
#include "core/ops/cuda_testutil.h"
#include "core/ops/elementwise.h"
#include "core/ops/testutil.h"
#include "gtest/gtest.h"
#include "nn/parameter.h"

namespace mt {
namespace nn {
namespace {

using ::mt::testing::ToDoubles;

ParamSpec Spec(std::string name, Shape shape, int split_dim, Init init, double std = 0.02) {
  ParamSpec s;
  s.name = std::move(name);
  s.global_shape = std::move(shape);
  s.split_dim = split_dim;
  s.init = init;
  s.init_std = std;
  return s;
}

// Parameters of odd sizes, split and replicated, with every init.
void Declare(ParameterStore* store) {
  ASSERT_TRUE(store->Add(Spec("a.weight", {6, 17}, 0, Init::kNormal, 0.3)).ok());
  ASSERT_TRUE(store->Add(Spec("a.gamma", {3}, -1, Init::kOnes)).ok());
  ASSERT_TRUE(store->Add(Spec("c.weight", {5, 4}, 1, Init::kNormal, 0.01)).ok());
  ASSERT_TRUE(store->Add(Spec("c.bias", {4}, 0, Init::kZeros)).ok());
}

bool SameBytes(const TensorView& a, const TensorView& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data, b.data, a.nbytes()) == 0;
}

TEST(ParameterStoreHostCopyTest, OffsetsDescribeTheFlatLayout) {
  ParameterStore store(/*tp_rank=*/1, /*tp_size=*/2);
  Declare(&store);
  EXPECT_EQ(store.offset(0), 0);
  EXPECT_EQ(store.offset(1), 3 * 17);
  EXPECT_EQ(store.offset(2), 3 * 17 + 3);
  EXPECT_EQ(store.offset(3), 3 * 17 + 3 + 5 * 2);
  ASSERT_TRUE(store.Allocate(5).ok());
  EXPECT_TRUE(store.device().is_cpu());
  for (int i = 0; i < store.size(); ++i) {
    EXPECT_EQ(store.value(i).data_as<float>(),
              store.flat_values().data_as<float>() + store.offset(i));
    EXPECT_EQ(store.grad(i).data_as<float>(),
              store.flat_grads().data_as<float>() + store.offset(i));
    EXPECT_TRUE(store.value(i).device.is_cpu());
  }
}

TEST(ParameterStoreHostCopyTest, CpuStoreCopiesValuesAndGradsBothWays) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    ParameterStore store(0, 1, dt);
    Declare(&store);
    ASSERT_TRUE(store.Allocate(11).ok());
    ExecContext ctx;
    absl::StatusOr<Tensor> values = store.CopyValuesToHost(ctx);
    ASSERT_TRUE(values.ok()) << values.status();
    EXPECT_EQ(values->shape(), (Shape{store.NumLocalElements()}));
    EXPECT_NE(values->data(), store.flat_values().data);  // A copy.
    EXPECT_TRUE(SameBytes(values->view(), store.flat_values()));

    for (int64_t j = 0; j < store.NumLocalElements(); ++j) {
      store.flat_grads().data_as<float>()[j] = 0.25f * static_cast<float>(j) - 3.0f;
    }
    absl::StatusOr<Tensor> grads = store.CopyGradsToHost(ctx);
    ASSERT_TRUE(grads.ok()) << grads.status();
    EXPECT_TRUE(SameBytes(grads->view(), store.flat_grads()));
    ASSERT_TRUE(store.ZeroGrads(ctx).ok());
    for (double g : ToDoubles(store.flat_grads())) EXPECT_EQ(g, 0.0);

    // Loading new masters refreshes the compute copies.
    Tensor fresh = ::mt::testing::RandomTensor({store.NumLocalElements()}, DType::kF32, 3, -2, 2);
    ASSERT_TRUE(store.CopyValuesFromHost(ctx, fresh.view()).ok());
    EXPECT_TRUE(SameBytes(fresh.view(), store.flat_values()));
    Tensor rounded = Tensor::Host({store.NumLocalElements()}, dt);
    ASSERT_TRUE(ops::Convert(ctx, fresh.view(), rounded.view()).ok());
    EXPECT_TRUE(SameBytes(rounded.view(), store.flat_compute_values())) << DTypeName(dt);
  }
}

TEST(ParameterStoreHostCopyTest, CopyValuesFromHostRejectsBadSources) {
  ParameterStore store(0, 1);
  Declare(&store);
  ASSERT_TRUE(store.Allocate(2).ok());
  ExecContext ctx;
  const int64_t n = store.NumLocalElements();
  Tensor short_one = Tensor::Zeros({n - 1}, DType::kF32);
  Tensor wrong_dtype = Tensor::Zeros({n}, DType::kBF16);
  float fake = 0;
  const TensorView on_gpu(&fake, {n}, DType::kF32, Device::Cuda(0));  // Never dereferenced.
  const std::vector<double> before = ToDoubles(store.flat_values());
  for (const TensorView& bad : {short_one.view(), wrong_dtype.view(), on_gpu}) {
    const absl::Status s = store.CopyValuesFromHost(ctx, bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("CopyValuesFromHost"), std::string::npos) << s;
  }
  EXPECT_EQ(ToDoubles(store.flat_values()), before);
}

TEST(ParameterStoreDeviceDeathTest, HostZeroGradsOnAGpuStoreIsAProgrammerError) {
  ParameterStore store(0, 1, DType::kF32, Device::Cuda(0));
  EXPECT_EQ(store.device(), Device::Cuda(0));
  EXPECT_DEATH(store.ZeroGrads(), "ZeroGrads\\(ctx\\)");
}

TEST(ParameterStoreDeviceTest, AllocateWithoutAGpuFailsCleanly) {
  if (cuda::DeviceCount() > 0) GTEST_SKIP() << "a GPU is present";
  ParameterStore store(0, 1, DType::kF32, Device::Cuda(0));
  Declare(&store);
  const absl::Status s = store.Allocate(1);
  EXPECT_FALSE(s.ok()) << "Allocate on cuda:0 without a GPU";
}

// ---- CUDA (skipped without a GPU).

class ParameterStoreCudaTest : public ::mt::testing::GpuTest<::testing::TestWithParam<DType>> {};

TEST_P(ParameterStoreCudaTest, HoldsTheCpuStoresBitsOnTheDevice) {
  const DType dt = GetParam();
  ParameterStore host(1, 2, dt), dev(1, 2, dt, Device::Cuda(0));
  Declare(&host);
  Declare(&dev);
  ASSERT_TRUE(host.Allocate(77).ok());
  ASSERT_TRUE(dev.Allocate(77).ok());
  for (int i = 0; i < dev.size(); ++i) {
    EXPECT_EQ(dev.value(i).device, Device::Cuda(0));
    EXPECT_EQ(dev.grad(i).device, Device::Cuda(0));
    EXPECT_EQ(dev.compute_value(i).device, Device::Cuda(0));
  }
  absl::StatusOr<Tensor> values = dev.CopyValuesToHost(gpu_);
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_TRUE(SameBytes(values->view(), host.flat_values()));
  absl::StatusOr<Tensor> compute = CopyToHost(gpu_, dev.flat_compute_values());
  ASSERT_TRUE(compute.ok()) << compute.status();
  EXPECT_TRUE(SameBytes(compute->view(), host.flat_compute_values()));
  absl::StatusOr<Tensor> grads = dev.CopyGradsToHost(gpu_);
  ASSERT_TRUE(grads.ok()) << grads.status();
  for (double g : ToDoubles(grads->view())) ASSERT_EQ(g, 0.0);

  // Gradients written on the device come back; ZeroGrads(ctx) clears them.
  Tensor g = ::mt::testing::RandomTensor({dev.NumLocalElements()}, DType::kF32, 4, -1, 1);
  ASSERT_TRUE(CopyTensor(gpu_, g.view(), dev.flat_grads()).ok());
  grads = dev.CopyGradsToHost(gpu_);
  ASSERT_TRUE(grads.ok());
  EXPECT_TRUE(SameBytes(grads->view(), g.view()));
  ASSERT_TRUE(dev.ZeroGrads(gpu_).ok());
  grads = dev.CopyGradsToHost(gpu_);
  ASSERT_TRUE(grads.ok());
  for (double x : ToDoubles(grads->view())) ASSERT_EQ(x, 0.0);

  // Loading masters from the host refreshes the device compute copies exactly as on the CPU.
  Tensor fresh = ::mt::testing::RandomTensor({dev.NumLocalElements()}, DType::kF32, 8, -3, 3);
  ASSERT_TRUE(dev.CopyValuesFromHost(gpu_, fresh.view()).ok());
  ASSERT_TRUE(host.CopyValuesFromHost(cpu_, fresh.view()).ok());
  values = dev.CopyValuesToHost(gpu_);
  ASSERT_TRUE(values.ok());
  EXPECT_TRUE(SameBytes(values->view(), fresh.view()));
  compute = CopyToHost(gpu_, dev.flat_compute_values());
  ASSERT_TRUE(compute.ok());
  EXPECT_TRUE(SameBytes(compute->view(), host.flat_compute_values()));
}

INSTANTIATE_TEST_SUITE_P(ComputeTypes, ParameterStoreCudaTest,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

}  // namespace
}  // namespace nn
}  // namespace mt
