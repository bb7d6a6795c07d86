// Tests of core/alloc.h: allocation on the context's device, zeroing, copies in every direction
// and the staging helpers. CPU cases run everywhere; CUDA cases skip without a GPU.
#include "core/alloc.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "core/cuda/device_context.h"
#include "core/cuda_device.h"
#include "core/ops/cuda_testutil.h"
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

TEST(AllocTest, InHostMemoryTellsHostFromDeviceMemory) {
  Tensor t = Tensor::Zeros({3}, DType::kF32);
  EXPECT_TRUE(InHostMemory(t.view()));
  EXPECT_TRUE(InHostMemory(Device::Cpu()));
  float fake = 0;
  EXPECT_FALSE(InHostMemory(TensorView(&fake, {1}, DType::kF32, Device::Cuda(0))));
  EXPECT_FALSE(InHostMemory(Device::Cuda(1)));
}

TEST(AllocTest, SetZeroClearsEveryByteOfEveryDtype) {
  ExecContext ctx;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64}) {
    Tensor t = IsFloating(dtype) ? RandomTensor({5, 13}, dtype, 3, 1.0, 2.0)
                                 : ::mt::testing::RandomInts({5, 13}, dtype, 3, 1, 1000);
    ASSERT_TRUE(SetZero(ctx, t.view()).ok());
    const auto* bytes = static_cast<const unsigned char*>(t.data());
    for (size_t i = 0; i < t.nbytes(); ++i) ASSERT_EQ(bytes[i], 0) << DTypeName(dtype) << " " << i;
  }
  Tensor empty = Tensor::Zeros({0, 4}, DType::kF32);
  EXPECT_TRUE(SetZero(ctx, empty.view()).ok());
  Tensor m = Tensor::Zeros({2, 3}, DType::kF32);
  TensorView strided = m.view();
  strided.shape = {3, 2};
  strided.strides = {1, 3};
  const absl::Status s = SetZero(ctx, strided);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("SetZero"), std::string::npos) << s;
  EXPECT_TRUE(SynchronizeDevice(ctx).ok());  // Nothing to wait for on the CPU.
}

// dst(r, j) == src(r, start + j) for every row r of the leading dimensions.
void ExpectColumns(const TensorView& src, int64_t start, const TensorView& dst) {
  const std::vector<double> s = ::mt::testing::ToDoubles(src);
  const std::vector<double> d = ::mt::testing::ToDoubles(dst);
  const int64_t n = src.dim(-1), w = dst.dim(-1), rows = dst.numel() / w;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < w; ++j) {
      ASSERT_EQ(d[r * w + j], s[r * n + start + j]) << "row " << r << " column " << j;
    }
  }
}

TEST(AllocTest, CopyLastDimSliceCopiesTheColumnsOfEveryRow) {
  ExecContext ctx;
  struct Case {
    Shape src;
    int64_t start, width;
  } const cases[] = {{{3, 5, 12}, 4, 4}, {{7, 11}, 3, 5}, {{11}, 0, 11}, {{2, 9}, 8, 1}};
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32}) {
    for (const Case& c : cases) {
      Tensor src = IsFloating(dtype) ? RandomTensor(c.src, dtype, 11, -4.0, 4.0)
                                     : ::mt::testing::RandomInts(c.src, dtype, 11, -500, 500);
      Shape dst_shape = c.src;
      dst_shape.back() = c.width;
      Tensor dst = Tensor::Host(dst_shape, dtype);
      std::memset(dst.data(), 0xFF, dst.nbytes());  // NaN (or -1) where nothing is written.
      ASSERT_TRUE(CopyLastDimSlice(ctx, src.view(), c.start, dst.view()).ok());
      ExpectColumns(src.view(), c.start, dst.view());
    }
  }
}

TEST(AllocTest, CopyLastDimSliceRejectsViewsThatDoNotFit) {
  ExecContext ctx;
  Tensor src = Tensor::Zeros({4, 6}, DType::kF32);
  Tensor dst = Tensor::Zeros({4, 3}, DType::kF32);
  Tensor other_rows = Tensor::Zeros({3, 3}, DType::kF32);
  Tensor other_dtype = Tensor::Zeros({4, 3}, DType::kBF16);
  Tensor scalar = Tensor::Zeros({}, DType::kF32);
  TensorView strided = src.view();
  strided.shape = {6, 4};
  strided.strides = {1, 6};
  const struct {
    TensorView src, dst;
    int64_t start;
  } bad[] = {{src.view(), dst.view(), 4},        {src.view(), dst.view(), -1},
             {src.view(), other_rows.view(), 0}, {src.view(), other_dtype.view(), 0},
             {scalar.view(), scalar.view(), 0},  {strided, dst.view(), 0}};
  for (const auto& b : bad) {
    const absl::Status s = CopyLastDimSlice(ctx, b.src, b.start, b.dst);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("CopyLastDimSlice"), std::string::npos) << s;
  }
  EXPECT_TRUE(CopyLastDimSlice(ctx, src.view(), 3, dst.view()).ok());
}

TEST(AllocTest, HostStagingPassesHostTensorsThrough) {
  ExecContext ctx;
  HostStaging staging;
  Tensor t = RandomTensor({3, 7}, DType::kBF16, 2);
  absl::StatusOr<TensorView> in = staging.Download(ctx, t.view());
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(in->data, t.data());  // No copy.
  absl::StatusOr<TensorView> out = staging.ForWriting(t.view());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->data, t.data());
  EXPECT_EQ(out->shape, t.shape());
  TensorView strided = t.view();
  strided.shape = {7, 3};
  strided.strides = {1, 7};
  EXPECT_EQ(staging.Download(ctx, strided).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(staging.ForWriting(strided).status().code(), absl::StatusCode::kInvalidArgument);
}

// The resident set grows by what a new buffer's written pages take (64 MiB here, allowing for
// pages the kernel reclaims or the allocator reuses), the peak is never below the current size,
// and the CPU has no device figure.
TEST(AllocTest, MemoryUsageSeesTouchedPages) {
  absl::StatusOr<MemoryUsage> before = CurrentMemoryUsage(Device::Cpu());
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_GT(before->resident_bytes, 0);
  EXPECT_GE(before->peak_resident_bytes, before->resident_bytes);
  EXPECT_EQ(before->device_in_use_bytes, -1);
  const int64_t n = int64_t{64} << 20;  // Bytes: 16 Mi f32 elements.
  Tensor t = Tensor::Host({n / 4}, DType::kF32);
  std::memset(t.data(), 1, n);
  absl::StatusOr<MemoryUsage> after = CurrentMemoryUsage(Device::Cpu());
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_GE(after->resident_bytes - before->resident_bytes, n * 9 / 10);
  EXPECT_GE(after->peak_resident_bytes, after->resident_bytes);
  EXPECT_EQ(static_cast<const unsigned char*>(t.data())[n - 1], 1);
}

// ---- CUDA (skipped without a GPU).

class AllocCudaTest : public ::mt::testing::GpuTest<> {};

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

TEST_F(AllocCudaTest, SetZeroAndSynchronizeOnTheDevice) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64}) {
    Tensor src = IsFloating(dtype) ? RandomTensor({9, 31}, dtype, 4, 1.0, 2.0)
                                   : ::mt::testing::RandomInts({9, 31}, dtype, 4, 1, 1000);
    absl::StatusOr<Tensor> dev = CopyToDevice(gpu_, src.view());
    ASSERT_TRUE(dev.ok()) << dev.status();
    ASSERT_TRUE(SetZero(gpu_, dev->view()).ok());
    ASSERT_TRUE(SynchronizeDevice(gpu_).ok());
    absl::StatusOr<Tensor> host = CopyToHost(gpu_, dev->view());
    ASSERT_TRUE(host.ok()) << host.status();
    const auto* bytes = static_cast<const unsigned char*>(host->data());
    for (size_t i = 0; i < host->nbytes(); ++i) ASSERT_EQ(bytes[i], 0) << DTypeName(dtype) << i;
  }
}

TEST_F(AllocCudaTest, CopyLastDimSliceOnTheDeviceMatchesTheHost) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kI64}) {
    Tensor src = IsFloating(dtype) ? RandomTensor({3, 5, 13}, dtype, 8, -4.0, 4.0)
                                   : ::mt::testing::RandomInts({3, 5, 13}, dtype, 8, -500, 500);
    absl::StatusOr<Tensor> dev_src = CopyToDevice(gpu_, src.view());
    ASSERT_TRUE(dev_src.ok()) << dev_src.status();
    Tensor nan = Tensor::Host({3, 5, 6}, dtype);
    std::memset(nan.data(), 0xFF, nan.nbytes());
    absl::StatusOr<Tensor> dev_dst = CopyToDevice(gpu_, nan.view());
    ASSERT_TRUE(dev_dst.ok()) << dev_dst.status();
    ASSERT_TRUE(CopyLastDimSlice(gpu_, dev_src->view(), 7, dev_dst->view()).ok());
    absl::StatusOr<Tensor> got = CopyToHost(gpu_, dev_dst->view());
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectColumns(src.view(), 7, got->view());
  }
  // A device view and a host view are two devices.
  absl::StatusOr<Tensor> dev = AllocZeros(gpu_, {2, 4}, DType::kF32);
  ASSERT_TRUE(dev.ok());
  Tensor host = Tensor::Zeros({2, 2}, DType::kF32);
  EXPECT_EQ(CopyLastDimSlice(gpu_, dev->view(), 0, host.view()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(AllocCudaTest, HostStagingDownloadsAndUploadsThroughOneReusedBuffer) {
  HostStaging staging;
  Tensor big = RandomTensor({17, 9}, DType::kF32, 5, -3.0, 3.0);
  Tensor small = RandomTensor({5, 3}, DType::kF16, 6, -3.0, 3.0);
  absl::StatusOr<Tensor> dev_big = CopyToDevice(gpu_, big.view());
  absl::StatusOr<Tensor> dev_small = CopyToDevice(gpu_, small.view());
  ASSERT_TRUE(dev_big.ok() && dev_small.ok());
  absl::StatusOr<TensorView> in = staging.Download(gpu_, dev_big->view());
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_TRUE(InHostMemory(*in));
  EXPECT_EQ(in->shape, big.shape());
  EXPECT_TRUE(SameBytes(*in, big.view()));
  const void* buffer = in->data;
  in = staging.Download(gpu_, dev_small->view());  // Smaller: the same buffer.
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(in->data, buffer);
  EXPECT_EQ(in->dtype, DType::kF16);
  EXPECT_TRUE(SameBytes(*in, small.view()));
  // Writing: host memory of the device tensor's shape, published with CopyTensor.
  absl::StatusOr<TensorView> out = staging.ForWriting(dev_big->view());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(InHostMemory(*out));
  EXPECT_EQ(out->shape, big.shape());
  Tensor fresh = RandomTensor({17, 9}, DType::kF32, 7, -3.0, 3.0);
  std::memcpy(out->data, fresh.data(), fresh.nbytes());
  ASSERT_TRUE(CopyTensor(gpu_, *out, dev_big->view()).ok());
  absl::StatusOr<Tensor> back = CopyToHost(gpu_, dev_big->view());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(SameBytes(back->view(), fresh.view()));
}

}  // namespace
}  // namespace mt
