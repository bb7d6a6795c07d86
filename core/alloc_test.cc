// Tests of core/alloc.h: allocation on the context's device, zeroing, copies in every direction
// and the staging helpers. CPU cases run everywhere; CUDA cases skip without a GPU.
#include "core/alloc.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "core/cuda/device_context.h"
#include "core/cuda_device.h"
#include "core/ops/testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace {

using ::mt::testing::RandomTensor;

bool SameBytes(const TensorView& a, const TensorView& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data, b.data, a.nbytes()) == 0;
}

TEST(AllocTest, AllocatesOnTheCpuByDefault) {
  ExecContext ctx;
  for (const Shape& shape : {Shape{}, Shape{1}, Shape{3, 17}, Shape{2, 0, 5}}) {
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64}) {
      absl::StatusOr<Tensor> t = Alloc(ctx, shape, dtype);
      ASSERT_TRUE(t.ok()) << t.status();
      EXPECT_EQ(t->shape(), shape);
      EXPECT_EQ(t->dtype(), dtype);
      EXPECT_TRUE(t->device().is_cpu());
      absl::StatusOr<Tensor> z = AllocZeros(ctx, shape, dtype);
      ASSERT_TRUE(z.ok()) << z.status();
      EXPECT_TRUE(z->device().is_cpu());
      const auto* bytes = static_cast<const unsigned char*>(z->data());
      for (size_t i = 0; i < z->nbytes(); ++i) ASSERT_EQ(bytes[i], 0) << i;
    }
  }
}

TEST(AllocTest, NegativeDimensionIsInvalidArgument) {
  ExecContext ctx;
  EXPECT_EQ(Alloc(ctx, {2, -1}, DType::kF32).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AllocZeros(ctx, {-3}, DType::kF32).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(AllocTest, CpuCopiesAreExactAndMayReshape) {
  ExecContext ctx;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    Tensor src = RandomTensor({3, 17}, dtype, 5, -2.0, 2.0);
    Tensor dst = Tensor::Zeros({51}, dtype);
    ASSERT_TRUE(CopyTensor(ctx, src.view(), dst.view()).ok());
    EXPECT_TRUE(SameBytes(src.view(), dst.view()));
    absl::StatusOr<Tensor> host = CopyToHost(ctx, src.view());
    ASSERT_TRUE(host.ok());
    EXPECT_EQ(host->shape(), src.shape());
    EXPECT_TRUE(SameBytes(src.view(), host->view()));
    absl::StatusOr<Tensor> dev = CopyToDevice(ctx, src.view());
    ASSERT_TRUE(dev.ok());
    EXPECT_TRUE(dev->device().is_cpu());
    EXPECT_NE(dev->data(), src.data());
    EXPECT_TRUE(SameBytes(src.view(), dev->view()));
  }
  // A view copied onto itself is a no-op.
  Tensor a = RandomTensor({4}, DType::kF32, 1, -1.0, 1.0);
  Tensor before = Tensor::Host({4}, DType::kF32);
  std::memcpy(before.data(), a.data(), a.nbytes());
  EXPECT_TRUE(CopyTensor(ctx, a.view(), a.view()).ok());
  EXPECT_TRUE(SameBytes(a.view(), before.view()));
}

TEST(AllocTest, CopyRejectsMismatchedViews) {
  ExecContext ctx;
  Tensor f = Tensor::Zeros({6}, DType::kF32);
  Tensor g = Tensor::Zeros({5}, DType::kF32);
  Tensor h = Tensor::Zeros({6}, DType::kBF16);
  Tensor m = Tensor::Zeros({2, 3}, DType::kF32);
  TensorView strided = m.view();
  strided.shape = {3, 2};
  strided.strides = {1, 3};  // A transposed view: not contiguous.
  for (const auto& [src, dst] : std::vector<std::pair<TensorView, TensorView>>{
           {f.view(), g.view()}, {f.view(), h.view()}, {strided, f.view()}}) {
    const absl::Status s = CopyTensor(ctx, src, dst);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("CopyTensor"), std::string::npos) << s;
  }
}

TEST(AllocTest, OnDeviceAndOnHostPassCpuTensorsThroughOnACpuContext) {
  ExecContext ctx;
  Tensor ids = Tensor::Host({2, 3}, DType::kI32);
  for (int i = 0; i < 6; ++i) ids.data_as<int32_t>()[i] = 7 * i - 4;
  Tensor staging;
  absl::StatusOr<TensorView> on = OnDevice(ctx, ids.view(), &staging, "tokens");
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_EQ(on->data, ids.data());  // No copy.
  EXPECT_TRUE(staging.empty());
  absl::StatusOr<TensorView> host = OnHost(ctx, ids.view(), &staging, "labels");
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ(host->data, ids.data());
  EXPECT_TRUE(staging.empty());
}

TEST(AllocTest, OnDeviceRejectsTensorsOnAnotherDeviceAndStridedViews) {
  ExecContext ctx;  // CPU.
  int32_t fake = 0;
  // Labelled cuda:0 (never dereferenced: rejected before any copy).
  const TensorView on_gpu(&fake, {1}, DType::kI32, Device::Cuda(0));
  Tensor staging;
  absl::StatusOr<TensorView> r = OnDevice(ctx, on_gpu, &staging, "tokens");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("tokens"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("cuda:0"), std::string::npos) << r.status();

  Tensor m = Tensor::Zeros({2, 3}, DType::kI32);
  TensorView strided = m.view();
  strided.shape = {3, 2};
  strided.strides = {1, 3};
  EXPECT_EQ(OnDevice(ctx, strided, &staging, "mask").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OnHost(ctx, strided, &staging, "mask").status().code(),
            absl::StatusCode::kInvalidArgument);
}

// ---- CUDA (skipped without a GPU).

class AllocCudaTest : public ::testing::Test {
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

TEST_F(AllocCudaTest, AllocatesOnTheContextDeviceAndZeroes) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64}) {
    for (const Shape& shape : {Shape{1}, Shape{3, 17}, Shape{129, 5}}) {
      absl::StatusOr<Tensor> z = AllocZeros(gpu_, shape, dtype);
      ASSERT_TRUE(z.ok()) << z.status();
      EXPECT_EQ(z->device(), Device::Cuda(0));
      absl::StatusOr<Tensor> host = CopyToHost(gpu_, z->view());
      ASSERT_TRUE(host.ok()) << host.status();
      EXPECT_TRUE(host->device().is_cpu());
      const auto* bytes = static_cast<const unsigned char*>(host->data());
      for (size_t i = 0; i < host->nbytes(); ++i) ASSERT_EQ(bytes[i], 0) << i;
    }
  }
}

TEST_F(AllocCudaTest, RoundTripsThroughTheDeviceBitForBit) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64}) {
    Tensor src = IsFloating(dtype) ? RandomTensor({17, 3}, dtype, 9, -3.0, 3.0)
                                   : ::mt::testing::RandomInts({17, 3}, dtype, 9, -1000, 1000);
    absl::StatusOr<Tensor> dev = CopyToDevice(gpu_, src.view());
    ASSERT_TRUE(dev.ok()) << dev.status();
    EXPECT_EQ(dev->device(), Device::Cuda(0));
    // Device -> device (queued on the stream), reshaped.
    absl::StatusOr<Tensor> dev2 = Alloc(gpu_, {51}, dtype);
    ASSERT_TRUE(dev2.ok());
    ASSERT_TRUE(CopyTensor(gpu_, dev->view(), dev2->view()).ok());
    absl::StatusOr<Tensor> back = CopyToHost(gpu_, dev2->view());
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(SameBytes(src.view(), back->view()));
  }
}

TEST_F(AllocCudaTest, OnDeviceUploadsHostTensorsAndReusesTheStaging) {
  Tensor ids = Tensor::Host({2, 3}, DType::kI32);
  for (int i = 0; i < 6; ++i) ids.data_as<int32_t>()[i] = 3 * i + 1;
  Tensor staging;
  absl::StatusOr<TensorView> on = OnDevice(gpu_, ids.view(), &staging, "tokens");
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_EQ(on->device, Device::Cuda(0));
  const void* first = staging.data();
  for (int i = 0; i < 6; ++i) ids.data_as<int32_t>()[i] = -i;
  on = OnDevice(gpu_, ids.view(), &staging, "tokens");
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_EQ(staging.data(), first);  // Same shape: reused.
  Tensor host_staging;
  absl::StatusOr<TensorView> back = OnHost(gpu_, *on, &host_staging, "tokens");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->device.is_cpu());
  EXPECT_TRUE(SameBytes(ids.view(), *back));
  // A device tensor passes through OnDevice untouched; a CPU context refuses it.
  absl::StatusOr<TensorView> same = OnDevice(gpu_, *on, &host_staging, "tokens");
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->data, on->data);
  Tensor unused;
  EXPECT_EQ(OnDevice(cpu_, *on, &unused, "tokens").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mt
