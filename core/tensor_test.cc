#include "core/tensor.h"

#include <cstdlib>
#include <set>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace mt {
namespace {

TEST(TensorTest, ShapesStridesAndViews) {
  Tensor t = Tensor::Zeros({3, 4, 5}, DType::kF32);
  EXPECT_EQ(t.numel(), 60);
  EXPECT_EQ(t.nbytes(), 240u);
  EXPECT_EQ(t.view().strides, (Shape{20, 5, 1}));
  EXPECT_TRUE(t.view().IsContiguous());
  EXPECT_EQ(t.view().dim(-1), 5);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u);

  float* p = t.data_as<float>();
  for (int i = 0; i < 60; ++i) p[i] = static_cast<float>(i);
  TensorView s = t.view().Slice(1, 3);
  EXPECT_EQ(s.shape, (Shape{2, 4, 5}));
  EXPECT_EQ(s.data_as<float>()[0], 20.0f);
  EXPECT_TRUE(s.IsContiguous());

  auto r = t.view().Reshape({12, 5});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->data_as<float>()[5], 5.0f);
  EXPECT_FALSE(t.view().Reshape({7, 5}).ok());
  EXPECT_EQ(t.view().Flatten2D().shape, (Shape{12, 5}));
  EXPECT_EQ(t.view().DebugString(), "f32[3, 4, 5] on cpu");
}

TEST(TensorTest, NonContiguousViewIsDetected) {
  Tensor t = Tensor::Zeros({4, 6}, DType::kF32);
  TensorView v = t.view();
  v.shape = {4, 3};  // Every other column: stride 6 along rows, but only 3 columns.
  EXPECT_FALSE(v.IsContiguous());
  EXPECT_FALSE(v.Reshape({12}).ok());
}

TEST(TensorTest, MoveTransfersOwnership) {
  Tensor a = Tensor::Zeros({8}, DType::kBF16);
  void* data = a.data();
  Tensor b = std::move(a);
  EXPECT_EQ(b.data(), data);
  EXPECT_EQ(b.dtype(), DType::kBF16);
}

TEST(TensorTest, BadShapesAndDevicesAreErrors) {
  EXPECT_EQ(Tensor::Empty({2, -1}, DType::kF32).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ParseDevice("gpu").ok());
  EXPECT_EQ(*ParseDevice("cuda:3"), Device::Cuda(3));
  EXPECT_EQ(ParseDevice("cpu")->ToString(), "cpu");
}

TEST(TensorTest, TypedAccessWithWrongTypeDies) {
  Tensor t = Tensor::Zeros({2}, DType::kF32);
  EXPECT_DEATH(t.data_as<int32_t>(), "tensor holds f32, accessed as i32");
}

// A pool that hands out host memory under a CUDA device label (never dereferenced as device
// memory here), counting what it serves and gets back.
class CountingPool : public DeviceMemoryPool {
 public:
  absl::StatusOr<void*> Allocate(size_t nbytes) override {
    if (nbytes > limit) return absl::ResourceExhaustedError("pool is full");
    ++allocations;
    void* p = std::malloc(nbytes);
    live.insert(p);
    return p;
  }
  void Free(void* ptr) override {
    ASSERT_EQ(live.erase(ptr), 1u) << "freed a pointer the pool did not hand out";
    std::free(ptr);
    ++frees;
  }
  size_t limit = 1 << 20;
  int allocations = 0, frees = 0;
  std::set<void*> live;
};

TEST(TensorTest, CudaBuffersComeFromAndReturnToTheirPool) {
  CountingPool pool;
  {
    auto t = Tensor::Empty({4, 8}, DType::kBF16, Device::Cuda(0), &pool);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->device(), Device::Cuda(0));
    EXPECT_EQ(pool.allocations, 1);
    EXPECT_EQ(pool.live.count(t->data()), 1u);
    Tensor moved = std::move(*t);  // The pool moves with the buffer: freed once.
    Tensor other;
    other = std::move(moved);
    EXPECT_EQ(pool.frees, 0);
  }
  EXPECT_EQ(pool.frees, 1);
  EXPECT_TRUE(pool.live.empty());
  // The pool's failure is the allocation's status; CPU tensors never use the pool.
  pool.limit = 16;
  EXPECT_EQ(Tensor::Empty({1024}, DType::kF32, Device::Cuda(0), &pool).status().code(),
            absl::StatusCode::kResourceExhausted);
  auto cpu = Tensor::Empty({1024}, DType::kF32, Device::Cpu(), &pool);
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(pool.allocations, 1);
}

}  // namespace
}  // namespace mt

namespace mt {
namespace {

// The host tensor bytes follow allocations and frees exactly; the peak holds the most at once
// until reset.
TEST(TensorTest, LargeHostBuffersArePageAndHugePageAligned) {
  // 64 bytes below 1 MiB, a page (4096) from 1 MiB, a huge page (2 MiB) from 32 MiB: what direct
  // reads of files straight into tensors need (checkpoint/direct_read.h).
  for (const auto& [bytes, alignment] :
       std::vector<std::pair<size_t, uintptr_t>>{{100, 64},
                                                 {(1u << 20) - 64, 64},
                                                 {1u << 20, 4096},
                                                 {(3u << 20) + 7, 4096},
                                                 {32u << 20, 2u << 20},
                                                 {(33u << 20) + 3, 2u << 20}}) {
    for (int k = 0; k < 3; ++k) {  // Several, so that a lucky address does not pass.
      absl::StatusOr<Buffer> b = Buffer::Allocate(Device::Cpu(), bytes);
      ASSERT_TRUE(b.ok()) << b.status();
      EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % alignment, 0u) << bytes << " bytes";
      static_cast<char*>(b->data())[bytes - 1] = 1;  // The whole size is usable.
    }
  }
}

TEST(HostTensorMemoryTest, CountsAllocationsFreesAndThePeak) {
  const HostTensorBytes before = HostTensorMemory();
  ResetHostTensorPeak();
  {
    Tensor a = Tensor::Host({1000}, DType::kF32);
    EXPECT_EQ(HostTensorMemory().in_use, before.in_use + 4000);
    {
      Tensor b = Tensor::Host({250}, DType::kI64);
      EXPECT_EQ(HostTensorMemory().in_use, before.in_use + 6000);
    }
    Tensor moved = std::move(a);  // A move neither allocates nor frees.
    EXPECT_EQ(HostTensorMemory().in_use, before.in_use + 4000);
    EXPECT_EQ(HostTensorMemory().peak, before.in_use + 6000);
  }
  EXPECT_EQ(HostTensorMemory().in_use, before.in_use);
  EXPECT_EQ(HostTensorMemory().peak, before.in_use + 6000);
  ResetHostTensorPeak();
  EXPECT_EQ(HostTensorMemory().peak, before.in_use);
}

}  // namespace
}  // namespace mt
