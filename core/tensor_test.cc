#include "core/tensor.h"

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

}  // namespace
}  // namespace mt
